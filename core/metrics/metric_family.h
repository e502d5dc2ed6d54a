// MetricFamily<M>: all series of one metric name, one M (Counter, Gauge or Histogram) per
// combination of label values. Series are created on first use and live as long as the family,
// so a caller may keep the reference WithLabels returns and update it without a lookup.
#ifndef PDSERVE_CORE_METRICS_METRIC_FAMILY_H_
#define PDSERVE_CORE_METRICS_METRIC_FAMILY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace pdserve {

template <typename Metric>
class MetricFamily {
 public:
  MetricFamily(std::string name, std::vector<std::string> label_names,
               std::function<std::unique_ptr<Metric>()> make)
      : name_(std::move(name)), label_names_(std::move(label_names)), make_(std::move(make)) {}

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }

  // The series with these label values (one per label name; missing values are empty and extra
  // ones are dropped, so a caller's mistake shows as an odd series, never as a crash).
  Metric& WithLabels(std::vector<std::string> values) {
    values.resize(label_names_.size());
    absl::MutexLock lock(&mu_);
    std::unique_ptr<Metric>& slot = series_[std::move(values)];
    if (slot == nullptr) slot = make_();
    return *slot;
  }
  // The one series of a family without labels.
  Metric& Get() { return WithLabels({}); }

  // Calls `visit(label_values, metric)` for every series, in label order.
  void ForEach(
      const std::function<void(const std::vector<std::string>&, const Metric&)>& visit) const {
    absl::MutexLock lock(&mu_);
    for (const auto& [values, metric] : series_) visit(values, *metric);
  }

 private:
  const std::string name_;
  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<Metric>()> make_;
  mutable absl::Mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> series_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_METRICS_METRIC_FAMILY_H_
