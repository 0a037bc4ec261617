// Prometheus' text exposition format (version 0.0.4), written: what the agent's and
// ddprun-rendezvous' /metrics answer. Each family is one `# HELP` line, one `# TYPE` line and its
// samples, in the order they are added; a family's name is given once and each sample is written
// under it (a histogram's samples get their _bucket/_sum/_count suffixes here).
//
// What the format requires and this keeps: a label value escapes backslash, double quote and
// newline; HELP text escapes backslash and newline; a value is a Go float (integers exactly,
// "+Inf", "-Inf", "NaN"); a name is [a-zA-Z_:][a-zA-Z0-9_:]*, which callers give as constants.
//
// Thread safety: a plain value; not shared.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddprun::common {

enum class MetricType { kCounter, kGauge, kHistogram };

using MetricLabel = std::pair<std::string_view, std::string_view>;

// Observations counted into fixed buckets (upper bounds, ascending; +Inf is implied), with their
// sum and count: a Prometheus histogram.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upperBounds);
  void observe(double value);

  const std::vector<double>& upperBounds() const { return bounds_; }
  // Observations <= upperBounds()[i] (cumulative, as the format wants).
  std::uint64_t cumulative(std::size_t bucket) const;
  std::uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bucket, not cumulative
  std::uint64_t count_ = 0;
  double sum_ = 0;
};

// Seconds from tens of milliseconds (a restart) to an hour (a node's absence): the buckets of
// every duration ddprun exports.
std::vector<double> durationBuckets();

class MetricsText {
 public:
  // Starts family `name`: its HELP and TYPE lines.
  void family(std::string_view name, MetricType type, std::string_view help);
  // One sample of the current family (a counter's or a gauge's).
  void sample(double value, std::initializer_list<MetricLabel> labels = {});
  void sample(double value, const std::vector<MetricLabel>& labels);
  // A histogram family's samples: each bucket's cumulative count, the sum and the count.
  void histogram(const Histogram& histogram, std::initializer_list<MetricLabel> labels = {});
  // family() and one sample, for the common case of a family with one unlabelled value.
  void single(std::string_view name, MetricType type, std::string_view help, double value);

  const std::string& text() const { return text_; }
  std::string take() { return std::move(text_); }

 private:
  void line(std::string_view suffix, const MetricLabel* begin, const MetricLabel* end,
            const MetricLabel* extra, double value);

  std::string text_;
  std::string name_;  // the current family's
};

// A value as the format writes it: "3", "0.25", "+Inf", "NaN".
std::string metricValue(double value);

}  // namespace ddprun::common
