#include "ddprun/common/metrics_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace ddprun::common {
namespace {

const char* typeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
  }
  return "untyped";
}

void appendEscaped(std::string& out, std::string_view text, bool quotes) {
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quotes && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

}  // namespace

Histogram::Histogram(std::vector<double> upperBounds)
    : bounds_(std::move(upperBounds)), counts_(bounds_.size(), 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::observe(double value) {
  const auto at = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  if (at != bounds_.end()) ++counts_[static_cast<std::size_t>(at - bounds_.begin())];
  ++count_;
  sum_ += value;
}

std::uint64_t Histogram::cumulative(std::size_t bucket) const {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i <= bucket && i < counts_.size(); ++i) total += counts_[i];
  return total;
}

std::vector<double> durationBuckets() {
  return {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600};
}

std::string metricValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  if (error != std::errc()) return "NaN";
  return std::string(buffer, end);
}

void MetricsText::family(std::string_view name, MetricType type, std::string_view help) {
  name_ = name;
  text_ += "# HELP ";
  text_ += name;
  text_ += ' ';
  appendEscaped(text_, help, false);
  text_ += "\n# TYPE ";
  text_ += name;
  text_ += ' ';
  text_ += typeName(type);
  text_ += '\n';
}

void MetricsText::line(std::string_view suffix, const MetricLabel* begin, const MetricLabel* end,
                       const MetricLabel* extra, double value) {
  text_ += name_;
  text_ += suffix;
  if (begin != end || extra != nullptr) {
    text_ += '{';
    bool first = true;
    const auto label = [&](const MetricLabel& item) {
      if (!first) text_ += ',';
      first = false;
      text_ += item.first;
      text_ += "=\"";
      appendEscaped(text_, item.second, true);
      text_ += '"';
    };
    for (const MetricLabel* item = begin; item != end; ++item) label(*item);
    if (extra != nullptr) label(*extra);
    text_ += '}';
  }
  text_ += ' ';
  text_ += metricValue(value);
  text_ += '\n';
}

void MetricsText::sample(double value, std::initializer_list<MetricLabel> labels) {
  line("", labels.begin(), labels.end(), nullptr, value);
}

void MetricsText::sample(double value, const std::vector<MetricLabel>& labels) {
  line("", labels.data(), labels.data() + labels.size(), nullptr, value);
}

void MetricsText::histogram(const Histogram& histogram, std::initializer_list<MetricLabel> labels) {
  const auto& bounds = histogram.upperBounds();
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    const std::string bound = metricValue(bounds[i]);
    const MetricLabel le{"le", bound};
    line("_bucket", labels.begin(), labels.end(), &le,
         static_cast<double>(histogram.cumulative(i)));
  }
  const MetricLabel inf{"le", "+Inf"};
  line("_bucket", labels.begin(), labels.end(), &inf, static_cast<double>(histogram.count()));
  line("_sum", labels.begin(), labels.end(), nullptr, histogram.sum());
  line("_count", labels.begin(), labels.end(), nullptr, static_cast<double>(histogram.count()));
}

void MetricsText::single(std::string_view name, MetricType type, std::string_view help,
                         double value) {
  family(name, type, help);
  sample(value);
}

}  // namespace ddprun::common
