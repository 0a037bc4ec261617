// A data-parallel trainer on ddprun's worker runtime: a small MLP (tanh hidden layer, linear
// output, mean squared error) trained by full-batch gradient descent on synthetic data.
//
// Each rank computes the gradient sum over its shard of the samples; one allReduce(sum) per step
// gives every rank the full-batch gradient, so every rank takes the same step and the weights
// equal those of a single process that sees all the data (--reference) up to floating-point
// summation order.
//
//   ddprun --standalone --nproc-per-node 4 dp_trainer --steps 200 --out weights.txt
//   dp_trainer --reference --steps 200 --out reference.txt
//
// The buffers are host memory, so either backend works; on a host with fewer GPUs than workers,
// DDPRUN_BACKEND=gloo keeps `auto` from choosing NCCL (one GPU per rank).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ddprun/runtime/process_group.h"

namespace {

struct Config {
  int samples = 4096;
  int features = 16;
  int hidden = 32;
  int steps = 200;
  double learningRate = 0.05;
  bool reference = false;
  std::string out;
};

// Deterministic pseudo-random numbers from (stream, index): every rank generates exactly the
// samples of the full dataset it owns, with no data files.
double uniform(std::uint64_t stream, std::uint64_t index) {
  std::uint64_t z = stream * 0x9E3779B97F4A7C15ull + index + 0x632BE59BD9B4E5ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / static_cast<double>(1ull << 53) * 2.0 - 1.0;
}

struct Model {
  int features, hidden;
  std::vector<double> parameters;  // W1 (hidden x features), b1 (hidden), w2 (hidden), b2 (1)

  Model(int f, int h)
      : features(f), hidden(h), parameters(static_cast<std::size_t>(h * f + 2 * h + 1)) {
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      parameters[i] = 0.3 * uniform(7, i);  // the same initial weights on every rank
    }
  }
  double* w1() { return parameters.data(); }
  double* b1() { return w1() + hidden * features; }
  double* w2() { return b1() + hidden; }
  double* b2() { return w2() + hidden; }

  // Adds this sample's gradient of 0.5 * (prediction - target)^2 to `gradient`; returns the loss.
  double accumulate(const double* x, double target, std::vector<double>& gradient) {
    std::vector<double> activation(static_cast<std::size_t>(hidden));
    double prediction = *b2();
    for (int j = 0; j < hidden; ++j) {
      double z = b1()[j];
      for (int k = 0; k < features; ++k) z += w1()[j * features + k] * x[k];
      activation[static_cast<std::size_t>(j)] = std::tanh(z);
      prediction += w2()[j] * activation[static_cast<std::size_t>(j)];
    }
    const double error = prediction - target;
    double* gw1 = gradient.data();
    double* gb1 = gw1 + hidden * features;
    double* gw2 = gb1 + hidden;
    double* gb2 = gw2 + hidden;
    *gb2 += error;
    for (int j = 0; j < hidden; ++j) {
      const double a = activation[static_cast<std::size_t>(j)];
      gw2[j] += error * a;
      const double delta = error * w2()[j] * (1 - a * a);
      gb1[j] += delta;
      for (int k = 0; k < features; ++k) gw1[j * features + k] += delta * x[k];
    }
    return 0.5 * error * error;
  }
};

void sample(int index, int features, std::vector<double>& x, double& target) {
  double linear = 0;
  for (int k = 0; k < features; ++k) {
    x[static_cast<std::size_t>(k)] = uniform(1, static_cast<std::uint64_t>(index * features + k));
    linear += (k % 3 - 1) * 0.5 * x[static_cast<std::size_t>(k)];
  }
  target = linear + std::sin(2 * x[0]) + 0.05 * uniform(2, static_cast<std::uint64_t>(index));
}

[[noreturn]] void usage(const char* problem) {
  std::fprintf(stderr,
               "dp_trainer: %s\nusage: dp_trainer [--samples N] [--features D] [--hidden H] "
               "[--steps S] [--lr RATE] [--reference] [--out FILE]\n",
               problem);
  std::exit(2);
}

Config parse(int argc, char** argv) {
  Config config;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + arg).c_str());
      return argv[++i];
    };
    if (arg == "--samples")
      config.samples = std::atoi(value().c_str());
    else if (arg == "--features")
      config.features = std::atoi(value().c_str());
    else if (arg == "--hidden")
      config.hidden = std::atoi(value().c_str());
    else if (arg == "--steps")
      config.steps = std::atoi(value().c_str());
    else if (arg == "--lr")
      config.learningRate = std::atof(value().c_str());
    else if (arg == "--reference")
      config.reference = true;
    else if (arg == "--out")
      config.out = value();
    else
      usage(("unknown option " + arg).c_str());
  }
  if (config.samples < 1 || config.features < 1 || config.hidden < 1 || config.steps < 0) {
    usage("sizes must be positive");
  }
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  const Config config = parse(argc, argv);
  std::unique_ptr<ddprun::runtime::ProcessGroup> group;
  int rank = 0;
  int world = 1;
  try {
    if (!config.reference) {
      group = ddprun::runtime::ProcessGroup::init();
      rank = group->rank();
      world = group->worldSize();
    }

    // This rank's shard: a contiguous block of the samples (the last ranks get one fewer).
    const int begin = static_cast<int>(static_cast<long long>(config.samples) * rank / world);
    const int end = static_cast<int>(static_cast<long long>(config.samples) * (rank + 1) / world);
    std::vector<std::vector<double>> inputs;
    std::vector<double> targets;
    for (int i = begin; i < end; ++i) {
      std::vector<double> x(static_cast<std::size_t>(config.features));
      double target = 0;
      sample(i, config.features, x, target);
      inputs.push_back(std::move(x));
      targets.push_back(target);
    }

    Model model(config.features, config.hidden);
    // The gradient sum, followed by the loss sum, reduced together in one collective.
    std::vector<double> buffer(model.parameters.size() + 1);
    for (int step = 0; step <= config.steps; ++step) {
      std::fill(buffer.begin(), buffer.end(), 0.0);
      std::vector<double> gradient(model.parameters.size(), 0.0);
      double loss = 0;
      for (std::size_t s = 0; s < inputs.size(); ++s) {
        loss += model.accumulate(inputs[s].data(), targets[s], gradient);
      }
      std::copy(gradient.begin(), gradient.end(), buffer.begin());
      buffer.back() = loss;
      if (group) group->allReduce(buffer.data(), buffer.size(), ddprun::runtime::ReduceOp::kSum);
      const double meanLoss = buffer.back() / config.samples;
      if (rank == 0 && (step % 50 == 0 || step == config.steps)) {
        std::printf("step %d loss %.6f\n", step, meanLoss);
        std::fflush(stdout);
      }
      if (step == config.steps) break;  // the last pass only measures the loss
      for (std::size_t p = 0; p < model.parameters.size(); ++p) {
        model.parameters[p] -= config.learningRate * buffer[p] / config.samples;
      }
    }

    if (rank == 0 && !config.out.empty()) {
      std::ofstream out(config.out);
      out.precision(17);
      for (double w : model.parameters) out << w << '\n';
    }
    if (group) group->shutdown();
  } catch (const ddprun::runtime::RuntimeError& error) {
    std::fprintf(stderr, "dp_trainer: rank %d: %s\n", rank, error.what());
    return 1;
  }
  return 0;
}
