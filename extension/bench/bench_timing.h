// How the driver's benchmarks time a call (driver_bench.cpp,
// driver_stream_bench.cpp): medians of repeated runs, in microseconds.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>
#include <vector>

// Median time of one call of fn, in microseconds, over `reps` runs of
// `inner` calls each.
inline double median_us(const std::function<void()>& fn, int reps,
                        int inner) {
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) fn();
    const auto stop = std::chrono::steady_clock::now();
    times.push_back(
        std::chrono::duration<double, std::micro>(stop - start).count() /
        inner);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Median times of a and b, measured in alternation so that both see the same
// background load.
inline std::pair<double, double> paired_median_us(
    const std::function<void()>& a, const std::function<void()>& b, int reps,
    int inner) {
  std::vector<double> times_a, times_b;
  for (int r = 0; r < reps; ++r) {
    times_a.push_back(median_us(a, 1, inner));
    times_b.push_back(median_us(b, 1, inner));
  }
  std::sort(times_a.begin(), times_a.end());
  std::sort(times_b.begin(), times_b.end());
  return {times_a[reps / 2], times_b[reps / 2]};
}
