#include "core/metrics/metrics_registry.h"

#include <prometheus/check_names.h>
#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <utility>

namespace pdserve {
namespace {

[[noreturn]] void Misuse(const std::string& what) {
  std::fprintf(stderr, "pdserve metrics: %s\n", what.c_str());
  std::abort();
}

}  // namespace

// A family whose series are read from a callback at every Collect.
class MetricsRegistry::CallbackFamily : public prometheus::Collectable {
 public:
  CallbackFamily(std::string name, std::string help, prometheus::MetricType type,
                 std::function<std::vector<CallbackSample>()> read)
      : name_(std::move(name)), help_(std::move(help)), type_(type), read_(std::move(read)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily family{name_, help_, type_, {}};
    for (const CallbackSample& sample : read_()) {
      prometheus::ClientMetric& metric = family.metric.emplace_back();
      for (const auto& [label, value] : sample.labels) metric.label.push_back({label, value});
      (type_ == prometheus::MetricType::Counter ? metric.counter.value : metric.gauge.value) =
          sample.value;
    }
    return {std::move(family)};
  }

 private:
  const std::string name_;
  const std::string help_;
  const prometheus::MetricType type_;
  const std::function<std::vector<CallbackSample>()> read_;
};

MetricsRegistry::MetricsRegistry() : registry_(prometheus::Registry::InsertBehavior::Throw) {}
MetricsRegistry::~MetricsRegistry() = default;

void MetricsRegistry::Reserve(const std::string& name, const std::string& help) {
  if (!prometheus::CheckMetricName(name)) Misuse("invalid metric name '" + name + "'");
  if (help.find_first_of("\\\n") != std::string::npos) {
    Misuse("help of " + name + " must be one line without backslashes");
  }
  MutexLock lock(&mu_);
  if (!names_.insert(name).second) Misuse("metric '" + name + "' registered twice");
}

template <typename Metric>
prometheus::Family<Metric>& MetricsRegistry::Register(prometheus::detail::Builder<Metric> builder,
                                                      const std::string& name,
                                                      const std::string& help) {
  Reserve(name, help);
  try {
    return builder.Name(name).Help(help).Register(registry_);
  } catch (const std::invalid_argument& error) {
    Misuse("cannot register " + name + ": " + error.what());
  }
}

prometheus::Family<prometheus::Counter>& MetricsRegistry::AddCounter(const std::string& name,
                                                                     const std::string& help) {
  return Register(prometheus::BuildCounter(), name, help);
}

prometheus::Family<prometheus::Gauge>& MetricsRegistry::AddGauge(const std::string& name,
                                                                 const std::string& help) {
  return Register(prometheus::BuildGauge(), name, help);
}

prometheus::Family<prometheus::Histogram>& MetricsRegistry::AddHistogram(const std::string& name,
                                                                         const std::string& help) {
  return Register(prometheus::BuildHistogram(), name, help);
}

void MetricsRegistry::AddGaugeCallback(const std::string& name, const std::string& help,
                                       std::function<std::vector<CallbackSample>()> read) {
  AddCallback(name, help, prometheus::MetricType::Gauge, std::move(read));
}

void MetricsRegistry::AddCounterCallback(const std::string& name, const std::string& help,
                                         std::function<std::vector<CallbackSample>()> read) {
  AddCallback(name, help, prometheus::MetricType::Counter, std::move(read));
}

void MetricsRegistry::AddCallback(const std::string& name, const std::string& help,
                                  prometheus::MetricType type,
                                  std::function<std::vector<CallbackSample>()> read) {
  Reserve(name, help);
  MutexLock lock(&mu_);
  callbacks_.push_back(std::make_unique<CallbackFamily>(name, help, type, std::move(read)));
}

std::string MetricsRegistry::Render() const {
  std::vector<prometheus::MetricFamily> families = registry_.Collect();
  {
    MutexLock lock(&mu_);
    for (const auto& callback : callbacks_) {
      for (prometheus::MetricFamily& family : callback->Collect()) {
        families.push_back(std::move(family));
      }
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace pdserve
