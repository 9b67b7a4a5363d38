// ctest-labels: model slurm
// A real Slurm cluster, started by the test on this machine (Debian's slurmctld, slurmd, slurm-client and
// munge; one node on loopback): a 4-task job array runs a small plan with `run --shard auto` on the
// embedded default model, a dependent job (sbatch --dependency=afterok) merges the shard reports, and
// the merged analysis must equal the unsharded run's: same cases, clusters, verdict and hashes. Then
// one shard is removed and the merge must refuse, and an array that is not 0..N-1 (--array=1,5,9) must
// be refused by every task. munged gets a private socket and key; every daemon is started here and
// stopped by its PID after the jobs are cancelled. Skips with a message only where the packages (or
// root, which slurmd needs) are missing: `scripts/deps.sh --test` installs them.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "repro/common/util.hpp"
#include "shard_util.hpp"
#include "test_util.hpp"

using namespace repro;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string q(const fs::path& p) { return "'" + p.string() + "'"; }

// A TCP port on 127.0.0.1 that is free now.
int free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = 0;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(s);
  return port;
}

// The cluster: each daemon started in the foreground by fork/exec, stopped by its PID.
struct Cluster {
  fs::path dir;  // short: socket paths stay well under the 108-byte limit
  std::string env;  // "SLURM_CONF=... " for every client command
  std::vector<std::pair<std::string, pid_t>> daemons;

  pid_t spawn(const std::string& name, const std::vector<std::string>& argv) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("SLURM_CONF", (dir / "slurm.conf").c_str(), 1);
      int fd = ::open((dir / (name + ".out")).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    daemons.emplace_back(name, pid);
    return pid;
  }
  std::string log(const std::string& name) const { return test::slurp(dir / (name + ".out")); }
  test::CmdResult sh(const std::string& cmd) const { return test::run_shell(env + cmd); }

  ~Cluster() {
    if (!daemons.empty()) {
      // Jobs first: their step daemons outlive slurmd.
      sh("timeout 10 scancel --user=$(id -un) 2>/dev/null");
      for (int i = 0; i < 50; ++i) {
        if (sh("timeout 5 squeue -h 2>/dev/null").output.find_first_not_of(" \n") == std::string::npos) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    for (auto it = daemons.rbegin(); it != daemons.rend(); ++it) {  // slurmd, slurmctld, munged
      ::kill(it->second, SIGTERM);
      int st = 0;
      bool gone = false;
      for (int i = 0; i < 100 && !gone; ++i) {
        gone = ::waitpid(it->second, &st, WNOHANG) == it->second;
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (!gone) {
        ::kill(it->second, SIGKILL);
        ::waitpid(it->second, &st, 0);
      }
    }
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

json read_json(const fs::path& p) { return json::parse(test::slurp(p)); }

using test::analysis_of;

void write_script(const fs::path& p, const std::string& body) {  // a job script of the test's own
  std::ofstream(p) << "#!/bin/sh\n" << body << "\n";
  fs::permissions(p, fs::perms::owner_all | fs::perms::group_read | fs::perms::others_read);
}

}  // namespace

TEST_CASE("a real Slurm job array: 4 shards with --shard auto, a dependent merge job, the merged analysis equal to "
          "the unsharded run's; a missing shard and an array not 0..N-1 refused") {
  for (const char* tool : {"munged", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue", "scancel"})
    if (test::run_shell(std::string("command -v ") + tool + " >/dev/null").code != 0) {
      MESSAGE("SKIPPED: " << tool << " not found; install the Debian packages slurmctld slurmd slurm-client munge "
                             "(scripts/deps.sh --test) to run the Slurm test");
      return;
    }
  if (::geteuid() != 0) {
    MESSAGE("SKIPPED: slurmd starts jobs as their users and must run as root; run the Slurm test as root");
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  Cluster c;
  {
    char tmpl[] = "/tmp/rs-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    c.dir = tmpl;
    fs::permissions(c.dir, fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  }
  const fs::path work = test::scratch_dir("slurm");  // the shards' outputs (the node is this machine)
  for (const char* d : {"state", "spool"}) fs::create_directories(c.dir / d);
  c.env = "SLURM_CONF=" + q(c.dir / "slurm.conf") + " ";

  // ---- munged: a private key and socket
  {
    std::string key(1024, '\0');
    std::ifstream("/dev/urandom", std::ios::binary).read(key.data(), static_cast<std::streamsize>(key.size()));
    std::ofstream(c.dir / "munge.key", std::ios::binary) << key;
    fs::permissions(c.dir / "munge.key", fs::perms::owner_read | fs::perms::owner_write);
  }
  const fs::path sock = c.dir / "m.sock";
  REQUIRE(sock.string().size() <= 60);
  c.spawn("munged", {"/usr/sbin/munged", "-F", "-f", "--socket=" + sock.string(),
                     "--key-file=" + (c.dir / "munge.key").string(), "--log-file=" + (c.dir / "munged.log").string(),
                     "--pid-file=" + (c.dir / "munged.pid").string(), "--seed-file=" + (c.dir / "munged.seed").string()});
  for (int i = 0; i < 100 && !fs::exists(sock); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  INFO("munged: " << c.log("munged"));
  REQUIRE(fs::exists(sock));

  // ---- slurm.conf: one node on loopback
  const int ctld_port = free_port(), d_port = free_port();
  REQUIRE(ctld_port > 0);
  REQUIRE(d_port > 0);
  const long cpus = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
  {
    std::ofstream conf(c.dir / "slurm.conf");
    conf << "ClusterName=repro" << getpid() << "\n"
         << "SlurmctldHost=localhost\n"
         << "SlurmUser=root\n"
         << "AuthType=auth/munge\nCredType=cred/munge\n"
         << "AuthInfo=socket=" << sock.string() << "\n"
         << "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny\n"
         << "SlurmctldPort=" << ctld_port << "\nSlurmdPort=" << d_port << "\n"
         << "StateSaveLocation=" << (c.dir / "state").string() << "\n"
         << "SlurmdSpoolDir=" << (c.dir / "spool").string() << "\n"
         << "SlurmctldPidFile=" << (c.dir / "ctld.pid").string() << "\n"
         << "SlurmdPidFile=" << (c.dir / "d.pid").string() << "\n"
         << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n"
         << "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
         << "ReturnToService=2\nMinJobAge=4\n"
         << "JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n"
         << "NodeName=localhost NodeAddr=127.0.0.1 CPUs=" << cpus << " State=UNKNOWN\n"
         << "PartitionName=audit Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n";
  }
  c.spawn("slurmctld", {"/usr/sbin/slurmctld", "-D", "-i"});
  c.spawn("slurmd", {"/usr/sbin/slurmd", "-D", "-N", "localhost"});
  bool idle = false;
  for (int i = 0; i < 120 && !idle; ++i) {
    idle = c.sh("timeout 5 sinfo -h -o %T 2>/dev/null").output.find("idle") != std::string::npos;
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  INFO("slurmctld: " << c.log("slurmctld"));
  INFO("slurmd: " << c.log("slurmd"));
  REQUIRE(idle);

  // ---- the plan, unsharded (here) and as a 4-task array of the documented recipe
  // (docs/recipes/slurm-audit.sbatch) with its dependent merge job (docs/recipes/slurm-merge.sbatch)
  {
    std::ofstream p(work / "prompts.txt");
    p << "Once upon a time\nThe dog\nLily saw a bird\nTom had a red ball\nThe sun was hot\nOne day, a cat\n";
  }
  const std::string plan = "--prompts " + (work / "prompts.txt").string() +
                           " --max-tokens 6 --repeats 1 --batch-sizes 1,3 --positions first,last --filler-sets 1 "
                           "--modes default,batch-invariant --precisions f32";
  const std::string bin = q(test::binary());
  auto whole = test::run_shell(bin + " run -q " + plan + " --out " + q(work / "whole"));
  INFO(whole.output);
  REQUIRE(whole.code <= 1);
  const fs::path recipes = fs::path(REPRO_SOURCE_DIR) / "docs" / "recipes";
  const std::string recipe_env = "REPRO_AUDIT=" + bin + " AUDIT_DIR=" + q(work) + " AUDIT_ARGS='" + plan + "' ";
  auto array = c.sh(recipe_env + "timeout 30 sbatch --parsable --array=0-3 -o " + q(work / "shard-%a.log") + " " +
                    q(recipes / "slurm-audit.sbatch"));
  INFO(array.output);
  REQUIRE(array.code == 0);
  const std::string job = repro::trim(array.output.substr(0, array.output.find(';')));
  auto merge = c.sh(recipe_env + "timeout 300 sbatch --parsable --wait --dependency=afterok:" + job + " -o " +
                    q(work / "merge.log") + " " + q(recipes / "slurm-merge.sbatch"));
  INFO(merge.output);
  for (int i = 0; i < 4; ++i) INFO("shard " << i << ": " << test::slurp(work / ("shard-" + std::to_string(i) + ".log")));
  INFO("merge job: " << test::slurp(work / "merge.log"));
  CHECK(merge.code == whole.code);
  REQUIRE(fs::exists(work / "merged" / "report.json"));
  const json merged = read_json(work / "merged" / "report.json");
  CHECK(analysis_of(merged) == analysis_of(read_json(work / "whole" / "report.json")));
  CHECK(merged["summary"]["cases"] == 12);
  CHECK(merged["merge"]["complete"] == true);
  REQUIRE(merged["merge"]["shards"].size() == 4);
  for (int i = 0; i < 4; ++i) {
    const json s = read_json(work / ("shard-" + std::to_string(i)) / "report.json");
    CHECK(s["shard"]["scheduler"] == "slurm");
    CHECK(s["shard"]["index"] == i + 1);
    CHECK(s["shard"]["count"] == 4);
    CHECK(s["shard"]["source"] ==
          "SLURM_ARRAY_TASK_ID=" + std::to_string(i) + " SLURM_ARRAY_TASK_COUNT=4 (job " + job + ")");
    CHECK(merged["merge"]["shards"][i]["report_sha256"] == s["digests"]["report_sha256"]);
  }

  // ---- one shard removed: the same merge recipe refuses and writes nothing
  const fs::path three = work / "three";
  fs::create_directories(three);
  for (int i : {0, 1, 3})
    fs::copy(work / ("shard-" + std::to_string(i)), three / ("shard-" + std::to_string(i)), fs::copy_options::recursive);
  auto refused = test::run_shell("REPRO_AUDIT=" + bin + " AUDIT_DIR=" + q(three) + " bash " +
                                 q(recipes / "slurm-merge.sbatch"));
  CHECK(refused.code == 2);
  CHECK(refused.output.find("error: report merge: shard 3 of 4 is missing (given: 1, 2, 4)") != std::string::npos);
  CHECK(!fs::exists(three / "merged"));

  // ---- an array that is not 0..N-1: every task refuses (exit 2) and says how to submit
  write_script(work / "gaps.sh", "exec " + bin + " run -q --prompt hi --max-tokens 2 --shard auto --dry-run");
  auto gaps = c.sh("timeout 120 sbatch --wait --array=1,5,9 -o " + q(work / "gaps-%a.log") + " " + q(work / "gaps.sh"));
  CHECK(gaps.code != 0);
  for (int id : {1, 5, 9}) {
    const std::string log = test::slurp(work / ("gaps-" + std::to_string(id) + ".log"));
    CAPTURE(log);
    CHECK(log.find("error: --shard auto: the Slurm array is not 0..N-1 (SLURM_ARRAY_TASK_MIN=1, "
                   "SLURM_ARRAY_TASK_MAX=9, SLURM_ARRAY_TASK_COUNT=3)") != std::string::npos);
  }
  MESSAGE("Slurm cluster, 4-task array, merge and refusals: "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
}
