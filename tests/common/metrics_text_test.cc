// The text exposition format as Prometheus parses it: HELP/TYPE lines, label escaping, Go-float
// values, a histogram's cumulative buckets with +Inf, _sum and _count. The agent's and the
// daemon's whole pages are parsed by prometheus_client's own parser in the integration tests.
#include "ddprun/common/metrics_text.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>

using ddprun::common::Histogram;
using ddprun::common::MetricsText;
using ddprun::common::MetricType;
using ddprun::common::metricValue;

TEST_CASE("metrics text: a family is its HELP and TYPE lines, then its samples") {
  MetricsText text;
  text.family("ddprun_restarts_total", MetricType::kCounter, "Restarts, by class");
  text.sample(2, {{"class", "worker"}});
  text.sample(1, {{"class", "user"}});
  text.single("ddprun_workers", MetricType::kGauge, "Workers running", 8);
  CHECK(text.text() ==
        "# HELP ddprun_restarts_total Restarts, by class\n"
        "# TYPE ddprun_restarts_total counter\n"
        "ddprun_restarts_total{class=\"worker\"} 2\n"
        "ddprun_restarts_total{class=\"user\"} 1\n"
        "# HELP ddprun_workers Workers running\n"
        "# TYPE ddprun_workers gauge\n"
        "ddprun_workers 8\n");
}

TEST_CASE("metrics text: label values and HELP escape what the format requires") {
  MetricsText text;
  text.family("x", MetricType::kGauge, "a \\ b\nc \"quoted\"");
  text.sample(1, {{"role", "a\"b\\c\nd"}});
  CHECK(text.text() ==
        "# HELP x a \\\\ b\\nc \"quoted\"\n"
        "# TYPE x gauge\n"
        "x{role=\"a\\\"b\\\\c\\nd\"} 1\n");
}

TEST_CASE("metrics text: values are Go floats") {
  CHECK(metricValue(3) == "3");
  CHECK(metricValue(0.25) == "0.25");
  CHECK(metricValue(1e21) == "1e+21");
  CHECK(metricValue(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(metricValue(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(metricValue(std::nan("")) == "NaN");
}

TEST_CASE("metrics text: a histogram's buckets are cumulative and end with +Inf") {
  Histogram histogram({1, 0.1, 10});  // sorted by the histogram
  histogram.observe(0.05);
  histogram.observe(0.1);  // on a bound: counted in it (le)
  histogram.observe(3);
  histogram.observe(100);
  MetricsText text;
  text.family("d_seconds", MetricType::kHistogram, "Durations");
  text.histogram(histogram, {{"what", "crash"}});
  CHECK(text.text() ==
        "# HELP d_seconds Durations\n"
        "# TYPE d_seconds histogram\n"
        "d_seconds_bucket{what=\"crash\",le=\"0.1\"} 2\n"
        "d_seconds_bucket{what=\"crash\",le=\"1\"} 2\n"
        "d_seconds_bucket{what=\"crash\",le=\"10\"} 3\n"
        "d_seconds_bucket{what=\"crash\",le=\"+Inf\"} 4\n"
        "d_seconds_sum{what=\"crash\"} 103.15\n"
        "d_seconds_count{what=\"crash\"} 4\n");
}
