#include "core/failure_class.h"

namespace ddprun::launcher {

const char* failureClassName(FailureClass kind) {
  switch (kind) {
    case FailureClass::kWorker:
      return "worker";
    case FailureClass::kUser:
      return "user";
    case FailureClass::kMachine:
      return "machine";
    case FailureClass::kStopped:
      return "stopped";
  }
  return "worker";
}

std::optional<FailureClass> failureClassFromName(std::string_view name) {
  for (FailureClass kind : {FailureClass::kWorker, FailureClass::kUser, FailureClass::kMachine,
                            FailureClass::kStopped}) {
    if (name == failureClassName(kind)) return kind;
  }
  return std::nullopt;
}

}  // namespace ddprun::launcher
