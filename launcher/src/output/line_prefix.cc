#include "output/line_prefix.h"

#include <fmt/format.h>
#include <time.h>

#include <utility>

namespace ddprun::launcher {

LinePrefix::LinePrefix(std::string_view substituted) {
  std::string text;
  auto flush = [&] {
    if (!text.empty()) parts_.push_back(Part{Field::kText, std::exchange(text, {})});
  };
  while (!substituted.empty()) {
    if (substituted.starts_with(kTimeMark)) {
      flush();
      parts_.push_back(Part{Field::kTime, {}});
      substituted.remove_prefix(kTimeMark.size());
      timed_ = true;
    } else if (substituted.starts_with(kElapsedMark)) {
      flush();
      parts_.push_back(Part{Field::kElapsed, {}});
      substituted.remove_prefix(kElapsedMark.size());
      timed_ = true;
    } else {
      text += substituted.front();
      substituted.remove_prefix(1);
    }
  }
  flush();
}

std::string LinePrefix::at(WallTime wall, std::chrono::nanoseconds elapsed) const {
  std::string result;
  for (const Part& part : parts_) {
    switch (part.field) {
      case Field::kText:
        result += part.text;
        break;
      case Field::kTime:
        result += clockText(wall);
        break;
      case Field::kElapsed:
        result += elapsedText(elapsed);
        break;
    }
  }
  return result;
}

std::string clockText(LinePrefix::WallTime wall) {
  const auto since = wall.time_since_epoch();
  const auto seconds = std::chrono::floor<std::chrono::seconds>(since);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(since - seconds);
  const time_t whole = static_cast<time_t>(seconds.count());
  struct tm local {};
  ::localtime_r(&whole, &local);
  return fmt::format("{:02}:{:02}:{:02}.{:03}", local.tm_hour, local.tm_min, local.tm_sec,
                     millis.count());
}

std::string elapsedText(std::chrono::nanoseconds elapsed) {
  return fmt::format("+{:.3f}s", std::chrono::duration<double>(elapsed).count());
}

}  // namespace ddprun::launcher
