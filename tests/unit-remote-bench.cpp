// ctest-labels: slow remote
// Client benchmark: 1024 requests in flight from one thread (closed loop) against a loopback
// fault server in slow mode running in a forked child process (so the client's RSS and CPU are its
// own). Measures client CPU time per request (CLOCK_THREAD_CPUTIME_ID of the loop thread) and the
// RSS growth at 1024 in flight. Numbers go to docs/BENCHMARKS.md.
//   ctest --test-dir build -L slow -R unit-remote-bench --output-on-failure -V
// REPRO_BENCH_INFLIGHT / REPRO_BENCH_SLOW_S / REPRO_BENCH_REPEATS override the defaults.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "repro/audit/remote_probe.hpp"
#include "fault_server.hpp"

using namespace repro;

namespace {
int env_int(const char* name, int def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : def;
}
double env_double(const char* name, double def) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : def;
}
}  // namespace

TEST_CASE("bench: 1024 requests in flight from one thread, CPU per request and memory") {
  const int inflight = env_int("REPRO_BENCH_INFLIGHT", 1024);
  const double slow_s = env_double("REPRO_BENCH_SLOW_S", 1.0);
  const int repeats = env_int("REPRO_BENCH_REPEATS", 8);
  for (bool stream : {false, true}) {
    CAPTURE(stream);
    int to_child[2], from_child[2];
    REQUIRE(::pipe(to_child) == 0);
    REQUIRE(::pipe(from_child) == 0);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // child: the server, until the parent closes the pipe
      ::close(to_child[1]);
      ::close(from_child[0]);
      {
        test::FaultServerOptions o;
        o.threads = inflight + 64;
        o.slow_s = slow_s;
        test::FaultServer srv(o);
        srv.set_default(test::Fault::slow);
        int port = srv.port();
        if (::write(from_child[1], &port, sizeof port) != sizeof port) ::_exit(1);
        char b;
        while (::read(to_child[0], &b, 1) > 0) {
        }
        int maxc = srv.max_concurrent.load();
        if (::write(from_child[1], &maxc, sizeof maxc) != sizeof maxc) ::_exit(1);
        srv.stop();
      }
      ::_exit(0);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    int port = 0;
    REQUIRE(::read(from_child[0], &port, sizeof port) == sizeof port);

    EndpointSpec spec = parse_endpoint_arg("bench=http://127.0.0.1:" + std::to_string(port) + "/v1");
    spec.api_model = "m";
    spec.api = "completions";
    spec.stream = stream;
    spec.max_retries = 2;
    spec.read_timeout_s = 30;
    RemoteProbe probe;
    probe.prompt_id = "bench";
    probe.prompt = "the probe prompt of the benchmark";
    probe.decoding.id = "greedy";
    probe.decoding.max_tokens = 16;
    probe.fillers = {"filler a", "filler b", "filler c"};
    RemoteStats st;
    auto out = run_remote_probe(spec, probe, inflight, repeats, nullptr, nullptr, &st);

    ::close(to_child[1]);
    int server_max = 0;
    REQUIRE(::read(from_child[0], &server_max, sizeof server_max) == sizeof server_max);
    ::close(from_child[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);

    const double cpu_us = 1e6 * st.client_cpu_s / static_cast<double>(std::max<int64_t>(1, st.attempts));
    const double rss_mb = (st.rss_peak_in_flight_kb - st.rss_start_kb) / 1024.0;
    MESSAGE("stream=" << stream << " in_flight(client max)=" << st.max_in_flight << " server max concurrent="
                      << server_max << " requests=" << st.requests << " attempts=" << st.attempts
                      << " aborted=" << st.aborted << " failed=" << st.failed << " wall=" << st.wall_s
                      << " s client_cpu=" << st.client_cpu_s << " s cpu/request=" << cpu_us
                      << " us rss_start=" << st.rss_start_kb / 1024.0 << " MiB rss_delta_at_peak=" << rss_mb
                      << " MiB (" << 1024.0 * rss_mb / std::max(1, st.max_in_flight) << " KiB/request) errors="
                      << st.to_json()["final_errors"].dump());
    CHECK(out.size() == static_cast<size_t>(repeats));
    for (auto& c : out) CHECK(c.error.empty());
    CHECK(st.max_in_flight == inflight);
    CHECK(server_max >= inflight * 9 / 10);
    CHECK(st.failed == 0);
  }
}
