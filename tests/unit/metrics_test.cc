#include "common/ops/metrics.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/prometheus_text.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

TEST(MetricsTest, RendersTheTextFormatExactly) {
  MetricsRegistry registry;
  registry.GetCounter("b_total", "Things done.")->Increment(3);
  registry.GetGauge("a_gauge", "A level.", {{"rank", "1"}})->Set(-0.5);
  registry.GetGauge("a_gauge", "A level.", {{"rank", "0"}})->Set(2);
  Histogram* h = registry.GetHistogram("c_seconds", "Times.", {0.25, 1});
  h->Observe(0.125);
  h->Observe(0.25);  // Bounds are inclusive.
  h->Observe(0.5);
  h->Observe(7);
  EXPECT_EQ(registry.Render(),
            "# HELP a_gauge A level.\n"
            "# TYPE a_gauge gauge\n"
            "a_gauge{rank=\"0\"} 2\n"
            "a_gauge{rank=\"1\"} -0.5\n"
            "# HELP b_total Things done.\n"
            "# TYPE b_total counter\n"
            "b_total 3\n"
            "# HELP c_seconds Times.\n"
            "# TYPE c_seconds histogram\n"
            "c_seconds_bucket{le=\"0.25\"} 2\n"
            "c_seconds_bucket{le=\"1\"} 3\n"
            "c_seconds_bucket{le=\"+Inf\"} 4\n"
            "c_seconds_sum 7.875\n"
            "c_seconds_count 4\n");
  EXPECT_TRUE(ParsePrometheusText(registry.Render()).ok());
}

TEST(MetricsTest, EscapesLabelValuesAndHelp) {
  MetricsRegistry registry;
  registry.GetCounter("x_total", "Line one\\two\nthree",
                      {{"path", "a\"b\\c\nd"}, {"code", "OK"}});
  EXPECT_EQ(registry.Render(),
            "# HELP x_total Line one\\\\two\\nthree\n"
            "# TYPE x_total counter\n"
            "x_total{path=\"a\\\"b\\\\c\\nd\",code=\"OK\"} 0\n");
  EXPECT_TRUE(ParsePrometheusText(registry.Render()).ok());
}

TEST(MetricsTest, SameSeriesIsTheSameObject) {
  MetricsRegistry registry;
  Counter* a = registry.GetCounter("n_total", "N.", {{"k", "v"}});
  EXPECT_EQ(a, registry.GetCounter("n_total", "N.", {{"k", "v"}}));
  EXPECT_NE(a, registry.GetCounter("n_total", "N.", {{"k", "w"}}));
}

TEST(MetricsTest, CountersNeverGoDown) {
  Counter c;
  c.Increment(2);
  c.Increment(-5);
  EXPECT_EQ(c.Value(), 2);
  c.IncrementTo(10);
  c.IncrementTo(4);
  EXPECT_EQ(c.Value(), 10);
  Gauge g;
  g.Set(3);
  g.Add(-4);
  EXPECT_EQ(g.Value(), -1);
}

TEST(MetricsTest, NumbersRoundTrip) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(0.0001), "0.0001");
  EXPECT_EQ(FormatMetricValue(123456789012), "123456789012");
  EXPECT_EQ(FormatMetricValue(1e20), "1e+20");
  EXPECT_EQ(FormatMetricValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatMetricValue(1.0 / 0.0), "+Inf");
  EXPECT_EQ(FormatMetricValue(-1.0 / 0.0), "-Inf");
  EXPECT_EQ(FormatMetricValue(std::nan("")), "NaN");
}

TEST(MetricsTest, CollectorsRunBeforeEveryRender) {
  MetricsRegistry registry;
  int calls = 0;
  registry.AddCollector([&]() {
    ++calls;
    registry.GetGauge("calls", "Renders so far.")->Set(calls);
  });
  EXPECT_THAT(registry.Render(), HasSubstr("calls 1\n"));
  EXPECT_THAT(registry.Render(), HasSubstr("calls 2\n"));
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  MetricsRegistry registry;
  Counter* c = registry.GetCounter("c_total", "C.");
  Histogram* h = registry.GetHistogram("h", "H.", {1, 2});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&]() {
      for (int i = 0; i < 10000; ++i) {
        c->Increment();
        h->Observe(i % 3);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->Value(), 40000);
  const Histogram::Reading r = h->Read();
  EXPECT_EQ(r.count, 40000u);
  EXPECT_EQ(r.cumulative.back(), 40000u);
}

TEST(MetricsDeathTest, MisuseIsAProgrammerError) {
  MetricsRegistry registry;
  EXPECT_DEATH(registry.GetCounter("bad name", "x"), "invalid metric name");
  EXPECT_DEATH(registry.GetCounter("ok", "x", {{"le", "1"}}),
               "invalid label name");
  registry.GetCounter("twice", "x");
  EXPECT_DEATH(registry.GetGauge("twice", "x"), "two types");
  EXPECT_DEATH(registry.GetHistogram("h", "x", {2, 1}), "increasing");
}

TEST(PrometheusTextTest, RejectsBrokenExpositions) {
  EXPECT_FALSE(ParsePrometheusText("x 1\n").ok());  // No HELP/TYPE.
  EXPECT_FALSE(
      ParsePrometheusText("# HELP x X.\n# TYPE x counter\nx -1\n").ok());
  EXPECT_FALSE(ParsePrometheusText(
                   "# HELP h H.\n# TYPE h histogram\n"
                   "h_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\n"
                   "h_sum 1\nh_count 2\n")
                   .ok());
  EXPECT_FALSE(ParsePrometheusText(
                   "# HELP x X.\n# TYPE x gauge\nx{a=\"unterminated} 1\n")
                   .ok());
}

}  // namespace
}  // namespace lockstep
