// K/N and `--shard auto` (see include/repro/audit/shards.hpp): the parsing of the flag and of the
// scheduler variables, on their own so that the fuzz target (fuzz/fuzz_shard.cpp) builds from this file.
#include <optional>

#include "repro/audit/shards.hpp"
#include "repro/common/error.hpp"
#include "repro/common/util.hpp"

namespace repro {

namespace {

// A non-negative decimal number of at most 9 digits, else nullopt.
std::optional<int> small_number(const std::string& s) {
  if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoi(s);
}

}  // namespace

// ============================================================================ K/N

ShardSpec parse_shard(const std::string& text) {
  ShardSpec s;
  const size_t slash = text.find('/');
  if (slash == std::string::npos) return s;
  auto k = small_number(text.substr(0, slash)), n = small_number(text.substr(slash + 1));
  if (!k || !n || *k < 1 || *n < 1 || *k > *n || *n > kMaxShards) return s;
  s.index = *k;
  s.count = *n;
  s.scheduler = "flag";
  s.source = "--shard " + text;
  return s;
}

std::string shard_text(const ShardSpec& s) { return std::to_string(s.index) + "/" + std::to_string(s.count); }

ShardSpec resolve_shard_auto(int shard_count, const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) -> std::optional<std::string> {
    const char* v = getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
  };
  const std::string fix = "; run it inside the array job, or give the shard as --shard K/N";
  auto number = [&](const char* name, const std::string& v) {
    auto n = small_number(trim(v));
    if (!n)
      throw UsageError(std::string("--shard auto: ") + name + "='" + printable(v) +
                       "' is not a non-negative integer" + fix);
    return *n;
  };
  auto half = [&](const char* set, const std::string& value, const std::string& unset, const std::string& why) {
    return UsageError(std::string("--shard auto: ") + set + " is set (" + printable(value) + ") but " + unset +
                      " is not; " + why + fix);
  };
  std::vector<ShardSpec> found;
  auto add = [&](const char* scheduler, int index0, int count, const std::string& source, const char* index_name) {
    if (count < 1 || count > kMaxShards)
      throw UsageError(std::string("--shard auto: ") + source + ": the shard count must be from 1 to " +
                       std::to_string(kMaxShards) + fix);
    if (index0 < 0 || index0 >= count)
      throw UsageError(std::string("--shard auto: ") + source + ": " + index_name + " is outside 0.." +
                       std::to_string(count - 1) + fix);
    ShardSpec s;
    s.index = index0 + 1;
    s.count = count;
    s.scheduler = scheduler;
    s.source = source;
    found.push_back(s);
  };
  const std::string count_flag = shard_count > 0 ? " --shard-count " + std::to_string(shard_count) : "";

  // ---- Slurm job arrays: 0-based task id, the count, and the array's bounds
  {
    auto id = get("SLURM_ARRAY_TASK_ID"), n = get("SLURM_ARRAY_TASK_COUNT");
    if (id && !n)
      throw half("SLURM_ARRAY_TASK_ID", *id, "SLURM_ARRAY_TASK_COUNT",
                 "both come from a Slurm job array (sbatch --array=0-N-1)");
    if (n && !id)
      throw half("SLURM_ARRAY_TASK_COUNT", *n, "SLURM_ARRAY_TASK_ID",
                 "both come from a Slurm job array (sbatch --array=0-N-1)");
    if (id && n) {
      const int i = number("SLURM_ARRAY_TASK_ID", *id), c = number("SLURM_ARRAY_TASK_COUNT", *n);
      auto mn = get("SLURM_ARRAY_TASK_MIN"), mx = get("SLURM_ARRAY_TASK_MAX");
      const int lo = mn ? number("SLURM_ARRAY_TASK_MIN", *mn) : 0;
      const int hi = mx ? number("SLURM_ARRAY_TASK_MAX", *mx) : c - 1;
      if (c < 1 || lo != 0 || hi != c - 1)
        throw UsageError("--shard auto: the Slurm array is not 0..N-1 (SLURM_ARRAY_TASK_MIN=" + std::to_string(lo) +
                         ", SLURM_ARRAY_TASK_MAX=" + std::to_string(hi) + ", SLURM_ARRAY_TASK_COUNT=" +
                         std::to_string(c) +
                         "): shard K is SLURM_ARRAY_TASK_ID + 1, so the task ids must be 0 to N-1 without gaps; "
                         "submit with sbatch --array=0-" + std::to_string(std::max(c, 1) - 1) +
                         " (a throttle such as %2 is fine)");
      std::string src = "SLURM_ARRAY_TASK_ID=" + std::to_string(i) + " SLURM_ARRAY_TASK_COUNT=" + std::to_string(c);
      if (auto job = get("SLURM_ARRAY_JOB_ID")) src += " (job " + printable(*job) + ")";
      add("slurm", i, c, src, "SLURM_ARRAY_TASK_ID");
    }
  }
  // ---- Kubernetes Indexed Jobs: 0-based index; the count is not exported
  if (auto idx = get("JOB_COMPLETION_INDEX")) {
    const int i = number("JOB_COMPLETION_INDEX", *idx);
    if (shard_count <= 0)
      throw half("JOB_COMPLETION_INDEX", *idx, "--shard-count",
                 "an Indexed Job exports its index but not its count: pass --shard-count with the Job's "
                 "spec.completions");
    add("kubernetes", i, shard_count,
        "JOB_COMPLETION_INDEX=" + std::to_string(i) + count_flag, "JOB_COMPLETION_INDEX");
  }
  // ---- GitLab parallel: 1-based index and the total
  {
    auto idx = get("CI_NODE_INDEX"), n = get("CI_NODE_TOTAL");
    if (n && !idx)
      throw UsageError("--shard auto: CI_NODE_TOTAL is set (" + printable(*n) +
                       ") but CI_NODE_INDEX is not: the GitLab job is not parallel; add `parallel: N` to the job" +
                       fix);
    if (idx && !n) throw half("CI_NODE_INDEX", *idx, "CI_NODE_TOTAL", "both come from a GitLab `parallel:` job");
    if (idx && n) {
      const int i = number("CI_NODE_INDEX", *idx), c = number("CI_NODE_TOTAL", *n);
      if (i < 1)
        throw UsageError("--shard auto: CI_NODE_INDEX=" + std::to_string(i) + " but GitLab counts from 1" + fix);
      add("gitlab", i - 1, c, "CI_NODE_INDEX=" + std::to_string(i) + " CI_NODE_TOTAL=" + std::to_string(c),
          "CI_NODE_INDEX - 1");
    }
  }
  // ---- AWS Batch array jobs: 0-based index and the size (or --shard-count)
  {
    auto idx = get("AWS_BATCH_JOB_ARRAY_INDEX"), n = get("AWS_BATCH_JOB_ARRAY_SIZE");
    if (n && !idx)
      throw half("AWS_BATCH_JOB_ARRAY_SIZE", *n, "AWS_BATCH_JOB_ARRAY_INDEX", "both come from an AWS Batch array job");
    if (idx) {
      const int i = number("AWS_BATCH_JOB_ARRAY_INDEX", *idx);
      if (!n && shard_count <= 0)
        throw half("AWS_BATCH_JOB_ARRAY_INDEX", *idx, "AWS_BATCH_JOB_ARRAY_SIZE",
                   "pass the array size as --shard-count");
      const int c = n ? number("AWS_BATCH_JOB_ARRAY_SIZE", *n) : shard_count;
      add("aws-batch", i, c,
          "AWS_BATCH_JOB_ARRAY_INDEX=" + std::to_string(i) +
              (n ? " AWS_BATCH_JOB_ARRAY_SIZE=" + std::to_string(c) : count_flag),
          "AWS_BATCH_JOB_ARRAY_INDEX");
    }
  }

  if (found.empty()) {
    if (shard_count > 0)
      throw UsageError("--shard auto:" + count_flag +
                       " is given but no shard index variable is set (JOB_COMPLETION_INDEX of a Kubernetes Indexed "
                       "Job, AWS_BATCH_JOB_ARRAY_INDEX)" + fix);
    if (auto gh = get("GITHUB_ACTIONS"); gh && *gh == "true")
      throw UsageError("--shard auto: GitHub Actions exports no matrix index; give it from the matrix: --shard "
                       "${{ matrix.shard }}/${{ strategy.job-total }} (docs/SCALE-OUT.md)");
    if (auto job = get("SLURM_JOB_ID"))
      throw UsageError("--shard auto: SLURM_JOB_ID is set (" + printable(*job) +
                       ") but SLURM_ARRAY_TASK_ID is not: the Slurm job is not an array; submit it with sbatch "
                       "--array=0-N-1" + fix);
    throw UsageError(
        "--shard auto: no shard variables are set (Slurm SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT, Kubernetes "
        "JOB_COMPLETION_INDEX with --shard-count, GitLab CI_NODE_INDEX and CI_NODE_TOTAL, AWS Batch "
        "AWS_BATCH_JOB_ARRAY_INDEX and AWS_BATCH_JOB_ARRAY_SIZE)" + fix);
  }
  for (const auto& f : found) {
    if (f.index != found[0].index || f.count != found[0].count)
      throw UsageError("--shard auto: the variables disagree: " + found[0].source + " gives shard " +
                       shard_text(found[0]) + " but " + f.source + " gives " + shard_text(f) +
                       "; unset the ones that do not belong to this job, or give --shard K/N");
    if (shard_count > 0 && f.count != shard_count)
      throw UsageError("--shard auto: " + f.source + " gives " + std::to_string(f.count) + " shards but" +
                       count_flag + " is given; drop --shard-count or make it agree");
  }
  ShardSpec s = found[0];
  for (size_t i = 1; i < found.size(); ++i) s.source += "; " + found[i].source;
  return s;
}

}  // namespace repro
