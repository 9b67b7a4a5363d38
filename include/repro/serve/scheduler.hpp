// The engine thread of `serve`: ONE thread owns the Engine. HTTP handlers put Jobs on the queue and
// wait on the Job; the thread admits queued jobs into the running batch (up to max_batch), calls
// step() while anything decodes, and routes each token and each result back to its Job.
// A Job whose client went away is cancelled: it leaves the batch before the next step.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "repro/engine/engine.hpp"

namespace repro::serve {

// One request, shared by its handler (reads) and the engine thread (writes).
struct Job {
  GenRequest req;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> tokens;  // produced so far
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
  bool done = false;
  GenResult result;
  int error_status = 0;  // != 0: failed with this HTTP status
  std::string error, error_code;
  std::atomic<bool> cancelled{false};  // set by cancel(): the client is gone
  // The largest batch (sequences in one engine step) of the steps this request was part of; 0 before
  // its first step. Responses carry it as "repro_audit": {"max_batch": N}.
  std::atomic<int> max_batch{0};
};

class Metrics;

struct SchedulerStats {
  int64_t requests = 0, completed = 0, cancelled = 0, steps = 0, tokens = 0, joined_running = 0;
  int max_batch_seen = 0, queued = 0, active = 0;
};

class Scheduler {
 public:
  Scheduler(const Model& model, EngineOptions eopts, int max_batch, std::function<void(int)> on_step);
  ~Scheduler();  // drain(now) and join

  void start();
  void submit(const std::shared_ptr<Job>& job);
  // The client went away: the job leaves the queue or the batch before the next step and ends with
  // error_status 499.
  void cancel(const std::shared_ptr<Job>& job);
  // Shutdown: queued and running jobs decode until `deadline`; whatever is left then ends with
  // error_status 503 (code "server_shutting_down"). Blocks until the engine thread has exited.
  void drain(std::chrono::steady_clock::time_point deadline);

  SchedulerStats stats() const;
  // The metrics the engine thread updates (steps, batch sizes, tokens, queue, finished requests);
  // set before start(), outliving the scheduler. nullptr: none.
  void set_metrics(Metrics* m) { metrics_ = m; }
  // The most sequences one step may decode (1 when the mode decodes requests alone; after start()).
  int max_batch() const { return max_batch_; }
  void pause();
  void resume();

 private:
  void loop();
  const Model& model_;
  EngineOptions eopts_;
  int max_batch_;
  std::function<void(int)> on_step_;
  Metrics* metrics_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool paused_ = false, draining_ = false, started_ = false;
  int cancels_ = 0;  // cancel() calls not yet seen by the loop
  std::chrono::steady_clock::time_point deadline_;
  SchedulerStats st_;
};

}  // namespace repro::serve
