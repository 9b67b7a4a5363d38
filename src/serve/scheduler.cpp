// The engine thread of `serve` (see repro/serve/scheduler.hpp): continuous batching over one Engine,
// with cancellation of jobs whose client left and a bounded drain at shutdown.
#include "repro/serve/scheduler.hpp"

#include <unordered_map>

#include "repro/common/error.hpp"
#include "repro/serve/metrics.hpp"

namespace repro::serve {

namespace {
using Clock = std::chrono::steady_clock;

void finish(const std::shared_ptr<Job>& j, GenResult r, Metrics* m) {
  if (m) m->finished("ok");
  {
    std::lock_guard<std::mutex> lk(j->mu);
    j->result = std::move(r);
    j->done = true;
  }
  j->cv.notify_all();
}

void fail(const std::shared_ptr<Job>& j, int status, const std::string& msg, const std::string& code,
          Metrics* m) {
  if (m) m->finished(status == 499 ? "cancelled" : std::to_string(status));
  {
    std::lock_guard<std::mutex> lk(j->mu);
    j->error_status = status;
    j->error = msg;
    j->error_code = code;
    j->done = true;
  }
  j->cv.notify_all();
}

const char* kShutdownMessage =
    "the server is shutting down and its grace period (--shutdown-grace) ended before this request finished";
}  // namespace

Scheduler::Scheduler(const Model& model, EngineOptions eopts, int max_batch, std::function<void(int)> on_step)
    : model_(model), eopts_(eopts), max_batch_(max_batch), on_step_(std::move(on_step)) {}

Scheduler::~Scheduler() { drain(Clock::now()); }

void Scheduler::start() {
  engine_ = std::make_unique<Engine>(model_, eopts_);
  if (engine_->describe().requests_alone) max_batch_ = 1;  // deterministic: every request decodes alone
  started_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Scheduler::submit(const std::shared_ptr<Job>& job) {
  bool refused = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    refused = draining_;  // the engine thread may be gone: never queue after a drain began
    if (!refused) {
      queue_.push_back(job);
      st_.requests++;
      if (metrics_) metrics_->set_waiting(static_cast<int>(queue_.size()));
    }
  }
  if (refused) fail(job, 503, "the server is shutting down", "server_shutting_down", metrics_);
  else cv_.notify_all();
}

void Scheduler::cancel(const std::shared_ptr<Job>& job) {
  if (job->cancelled.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++cancels_;
  }
  cv_.notify_all();
}

void Scheduler::drain(Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!draining_ || deadline < deadline_) deadline_ = deadline;
    draining_ = true;
    paused_ = false;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  SchedulerStats s = st_;
  s.queued = static_cast<int>(queue_.size());
  return s;
}

void Scheduler::pause() {
  std::lock_guard<std::mutex> lk(mu_);
  paused_ = true;
}

void Scheduler::resume() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

void Scheduler::loop() {
  std::unordered_map<int, std::shared_ptr<Job>> running;
  auto bind = [&] {
    engine_->on_token = [this, &running](int handle, int token, float logprob, const std::vector<TokenLogprob>& top) {
      if (metrics_) metrics_->generated_tokens(1);
      auto it = running.find(handle);
      if (it == running.end()) return;
      Job& j = *it->second;
      {
        std::lock_guard<std::mutex> lk(j.mu);
        j.tokens.push_back(token);
        j.logprobs.push_back(logprob);
        if (!top.empty()) j.top.push_back(top);
      }
      j.cv.notify_all();
    };
  };
  bind();
  for (;;) {
    std::vector<std::shared_ptr<Job>> admit, dropped;
    const bool busy = engine_->busy();
    bool expired = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return draining_ || busy || cancels_ > 0 || (!paused_ && !queue_.empty()); });
      cancels_ = 0;
      expired = draining_ && Clock::now() >= deadline_;
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->cancelled || expired) {
          dropped.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      if (draining_ && queue_.empty() && !busy && dropped.empty()) break;
      if (!paused_ || draining_)
        while (!queue_.empty() && engine_->active() + static_cast<int>(admit.size()) < max_batch_) {
          admit.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      if (metrics_) metrics_->set_waiting(static_cast<int>(queue_.size()));
    }
    int64_t cancelled_now = 0;
    for (auto& j : dropped) {
      if (j->cancelled) {
        fail(j, 499, "the client closed the connection", "client_closed_request", metrics_);
        ++cancelled_now;
      } else {
        fail(j, 503, kShutdownMessage, "server_shutting_down", metrics_);
      }
    }
    // Jobs whose client left (or, at the end of the grace period, every job) leave the batch now.
    for (auto it = running.begin(); it != running.end();) {
      const bool gone = it->second->cancelled.load();
      if (gone || expired) {
        engine_->cancel(it->first);
        if (gone) {
          fail(it->second, 499, "the client closed the connection", "client_closed_request", metrics_);
          ++cancelled_now;
        } else {
          fail(it->second, 503, kShutdownMessage, "server_shutting_down", metrics_);
        }
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    int64_t joined = 0;
    for (auto& j : admit) {
      try {
        const auto prompt = static_cast<int64_t>(j->req.prompt.size());
        int h = engine_->submit(j->req);
        running[h] = j;
        if (busy) ++joined;
        if (metrics_) metrics_->prompt_tokens(prompt);
      } catch (const UsageError& e) {
        fail(j, 400, e.what(), "invalid_value", metrics_);
      } catch (const std::exception& e) {
        fail(j, 500, std::string("the engine rejected the request: ") + e.what(), "engine_error", metrics_);
      }
    }
    if (!engine_->busy()) {
      if (metrics_) metrics_->set_running(0);
      std::lock_guard<std::mutex> lk(mu_);
      st_.joined_running += joined;
      st_.cancelled += cancelled_now;
      st_.active = 0;
      continue;
    }
    const int batch = engine_->active();
    for (auto& [h, j] : running)
      if (j->max_batch.load() < batch) j->max_batch = batch;  // only this thread writes it
    if (metrics_) metrics_->set_running(batch);
    std::vector<int> finished;
    try {
      finished = engine_->step();
    } catch (const std::exception& e) {
      // The engine's state is unknown after a failed step: fail what it held and start afresh.
      for (auto& [h, j] : running) fail(j, 500, std::string("engine failure: ") + e.what(), "engine_error", metrics_);
      running.clear();
      engine_ = std::make_unique<Engine>(model_, eopts_);
      bind();
      continue;
    }
    // The stats are updated before the results are delivered: a client that has its answer sees
    // its request counted in /health and stats() (no window where it is done but not completed).
    std::vector<std::pair<std::shared_ptr<Job>, GenResult>> results;
    for (int h : finished) {
      auto it = running.find(h);
      GenResult r = engine_->take_result(h);
      if (it == running.end()) continue;
      results.emplace_back(it->second, std::move(r));
      running.erase(it);
    }
    const auto done_now = static_cast<int64_t>(results.size());
    {
      std::lock_guard<std::mutex> lk(mu_);
      st_.joined_running += joined;
      st_.cancelled += cancelled_now;
      st_.steps++;
      st_.max_batch_seen = std::max(st_.max_batch_seen, batch);
      st_.completed += done_now;
      st_.active = engine_->active();
      st_.tokens = engine_->generated_tokens();
    }
    if (metrics_) {
      metrics_->step(batch);
      metrics_->set_running(engine_->active());
    }
    for (auto& [job, r] : results) finish(job, std::move(r), metrics_);
    if (on_step_) on_step_(batch);
  }
  std::lock_guard<std::mutex> lk(mu_);
  st_.active = 0;
}

}  // namespace repro::serve
