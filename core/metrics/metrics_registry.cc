#include "core/metrics/metrics_registry.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/metrics/exposition.h"

namespace pdserve {

struct MetricsRegistry::Entry {
  std::string name;
  std::string help;
  std::string type;
  std::vector<std::string> label_names;
  std::unique_ptr<MetricFamily<Counter>> counter;
  std::unique_ptr<MetricFamily<Gauge>> gauge;
  std::unique_ptr<MetricFamily<Histogram>> histogram;
  std::function<std::vector<CallbackSample>()> read;

  void Render(std::string& out) const;
};

namespace {

[[noreturn]] void Misuse(const std::string& what) {
  std::fprintf(stderr, "pdserve metrics: %s\n", what.c_str());
  std::abort();
}

void RenderHistogram(std::string& out, const std::string& name,
                     const std::vector<std::string>& label_names,
                     const std::vector<std::string>& values, const Histogram& histogram) {
  const Histogram::Snapshot snapshot = histogram.Collect();
  const std::string bucket = name + "_bucket";
  for (size_t i = 0; i < snapshot.upper_bounds.size(); ++i) {
    AppendSample(out, bucket, label_names, values,
                 static_cast<double>(snapshot.cumulative_counts[i]), "le",
                 FormatSampleValue(snapshot.upper_bounds[i]));
  }
  AppendSample(out, bucket, label_names, values, static_cast<double>(snapshot.count), "le", "+Inf");
  AppendSample(out, name + "_sum", label_names, values, snapshot.sum);
  AppendSample(out, name + "_count", label_names, values, static_cast<double>(snapshot.count));
}

}  // namespace

void MetricsRegistry::Entry::Render(std::string& out) const {
  AppendFamilyHeader(out, name, help, type);
  if (counter != nullptr) {
    counter->ForEach([&](const std::vector<std::string>& values, const Counter& metric) {
      AppendSample(out, name, label_names, values, metric.Value());
    });
  } else if (gauge != nullptr) {
    gauge->ForEach([&](const std::vector<std::string>& values, const Gauge& metric) {
      AppendSample(out, name, label_names, values, metric.Value());
    });
  } else if (histogram != nullptr) {
    histogram->ForEach([&](const std::vector<std::string>& values, const Histogram& metric) {
      RenderHistogram(out, name, label_names, values, metric);
    });
  } else if (read) {
    for (const CallbackSample& sample : read()) {
      AppendSample(out, name, label_names, sample.label_values, sample.value);
    }
  }
}

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

std::unique_ptr<MetricsRegistry::Entry> MetricsRegistry::NewEntry(
    const std::string& name, const std::string& help, std::vector<std::string> label_names,
    const char* type) {
  if (!IsValidMetricName(name)) Misuse("invalid metric name '" + name + "'");
  for (const std::string& label : label_names) {
    if (!IsValidLabelName(label) || label == "le") {
      Misuse("invalid label name '" + label + "' of " + name);
    }
  }
  auto entry = std::make_unique<Entry>();
  entry->name = name;
  entry->help = help;
  entry->type = type;
  entry->label_names = std::move(label_names);
  return entry;
}

void MetricsRegistry::Insert(std::unique_ptr<Entry> entry) {
  absl::MutexLock lock(&mu_);
  for (const auto& existing : entries_) {
    if (existing->name == entry->name) Misuse("metric '" + entry->name + "' registered twice");
  }
  entries_.push_back(std::move(entry));
}

MetricFamily<Counter>& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                                   std::vector<std::string> label_names) {
  std::unique_ptr<Entry> entry = NewEntry(name, help, label_names, "counter");
  entry->counter = std::make_unique<MetricFamily<Counter>>(
      name, std::move(label_names), [] { return std::make_unique<Counter>(); });
  MetricFamily<Counter>& family = *entry->counter;
  Insert(std::move(entry));
  return family;
}

MetricFamily<Gauge>& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                               std::vector<std::string> label_names) {
  std::unique_ptr<Entry> entry = NewEntry(name, help, label_names, "gauge");
  entry->gauge = std::make_unique<MetricFamily<Gauge>>(name, std::move(label_names),
                                                       [] { return std::make_unique<Gauge>(); });
  MetricFamily<Gauge>& family = *entry->gauge;
  Insert(std::move(entry));
  return family;
}

MetricFamily<Histogram>& MetricsRegistry::AddHistogram(const std::string& name,
                                                       const std::string& help,
                                                       std::vector<double> upper_bounds,
                                                       std::vector<std::string> label_names) {
  for (size_t i = 0; i < upper_bounds.size(); ++i) {
    if (!std::isfinite(upper_bounds[i]) || (i > 0 && upper_bounds[i] <= upper_bounds[i - 1])) {
      Misuse("bucket bounds of " + name + " must be finite and strictly increasing");
    }
  }
  std::unique_ptr<Entry> entry = NewEntry(name, help, label_names, "histogram");
  entry->histogram = std::make_unique<MetricFamily<Histogram>>(
      name, std::move(label_names),
      [bounds = std::move(upper_bounds)] { return std::make_unique<Histogram>(bounds); });
  MetricFamily<Histogram>& family = *entry->histogram;
  Insert(std::move(entry));
  return family;
}

void MetricsRegistry::AddGaugeCallback(const std::string& name, const std::string& help,
                                       std::vector<std::string> label_names,
                                       std::function<std::vector<CallbackSample>()> read) {
  AddCallback(name, help, std::move(label_names), std::move(read), "gauge");
}

void MetricsRegistry::AddCounterCallback(const std::string& name, const std::string& help,
                                         std::vector<std::string> label_names,
                                         std::function<std::vector<CallbackSample>()> read) {
  AddCallback(name, help, std::move(label_names), std::move(read), "counter");
}

void MetricsRegistry::AddCallback(const std::string& name, const std::string& help,
                                  std::vector<std::string> label_names,
                                  std::function<std::vector<CallbackSample>()> read,
                                  const char* type) {
  std::unique_ptr<Entry> entry = NewEntry(name, help, std::move(label_names), type);
  entry->read = std::move(read);
  Insert(std::move(entry));
}

std::string MetricsRegistry::Render() const {
  std::string out;
  absl::MutexLock lock(&mu_);
  for (const auto& entry : entries_) entry->Render(out);
  return out;
}

}  // namespace pdserve
