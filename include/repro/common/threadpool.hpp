// A minimal fork-join thread pool. Kernels split work over OUTPUT rows/columns only, so the
// value of every output element never depends on the thread count.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace repro {

// Most threads a pool may start: 4 x the cores of this machine, at least 16. More only adds
// switching; a typo such as --threads 100000 must not start 100000 threads.
int max_threads();
// Throws UsageError naming --threads and the limit when n is outside 1..max_threads().
void check_threads(int n);

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // check_threads(threads) first
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end) on contiguous chunks of [0, n) covering it exactly, one chunk per
  // thread (the calling thread takes chunk 0). Returns when all chunks are done.
  void parallel_for(int n, const std::function<void(int begin, int end)>& fn);

 private:
  void worker(int index);
  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int, int)>* job_ = nullptr;
  int job_n_ = 0;
  // Written under mu_; also read without it while a thread spins (see threadpool.cpp).
  std::atomic<long> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace repro
