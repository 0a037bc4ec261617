// The smallest real user of the installed runtime: one all-reduce, checked.
#include <ddprun/runtime/process_group.h>

#include <cstdio>

int main() {
  try {
    auto group = ddprun::runtime::ProcessGroup::init();
    int value = group->rank() + 1;
    group->allReduce(&value, 1);
    const int world = group->worldSize();
    const bool ok = value == world * (world + 1) / 2;
    std::printf("consumer: rank %d of %d: sum %d %s\n", group->rank(), world, value,
                ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const ddprun::runtime::RuntimeError& error) {
    std::fprintf(stderr, "consumer: %s\n", error.what());
    return 1;
  }
}
