#include "repro/common/threadpool.hpp"

#include <algorithm>
#include <string>

#include "repro/common/error.hpp"

namespace repro {

int max_threads() {
  unsigned hc = std::thread::hardware_concurrency();
  return std::max(16, 4 * static_cast<int>(hc == 0 ? 1 : hc));
}

void check_threads(int n) {
  if (n < 1 || n > max_threads())
    throw UsageError("--threads " + std::to_string(n) + " is outside 1.." + std::to_string(max_threads()) +
                     " (at most 4 x the " + std::to_string(std::thread::hardware_concurrency()) +
                     " cores of this machine, or 16); give a smaller --threads");
}

ThreadPool::ThreadPool(int threads) : n_threads_(threads < 1 ? 1 : threads) {
  check_threads(n_threads_);
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

// A thread that has just finished (a worker its chunk, the caller its own) first spins on the
// atomic it waits for, for about 30 us, and only then sleeps on the condition variable: a decode
// step dispatches ~90 matmuls, and waking a sleeping thread costs tens of microseconds each time
// (at batch 1 on 2 threads that was most of what the second thread saved). Spinning changes when
// a thread notices work, never which chunk it computes.
namespace {
constexpr int kSpinIterations = 2000;
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

static void chunk(int n, int parts, int idx, int& b, int& e) {
  int base = n / parts, rem = n % parts;
  b = idx * base + (idx < rem ? idx : rem);
  e = b + base + (idx < rem ? 1 : 0);
}

void ThreadPool::parallel_for(int n, const std::function<void(int, int)>& fn) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    job_ = &fn;
    job_n_ = n;
    pending_ = n_threads_ - 1;
    ++generation_;
  }
  cv_start_.notify_all();
  int b, e;
  chunk(n, n_threads_, 0, b, e);
  if (b < e) fn(b, e);
  for (int i = 0; i < kSpinIterations && pending_.load(std::memory_order_acquire) != 0; ++i) cpu_relax();
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(int index) {
  long seen = 0;
  while (true) {
    const std::function<void(int, int)>* job;
    int n;
    for (int i = 0; i < kSpinIterations && generation_.load(std::memory_order_acquire) == seen &&
                    !stop_.load(std::memory_order_relaxed);
         ++i)
      cpu_relax();
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
    }
    int b, e;
    chunk(n, n_threads_, index, b, e);
    if (b < e) (*job)(b, e);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

}  // namespace repro
