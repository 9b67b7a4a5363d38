// Shards: one plan split over the machines of a Slurm job array, a Kubernetes Indexed Job, a CI
// matrix or an AWS Batch array, and the shard reports merged back into one report.
//
// Assignment is by case, never by replay: every context and repeat of one (prompt, decoding, mode,
// precision) case runs on one shard, so a difference between hosts is never confounded with a
// difference between batch contexts. A case goes to shard 1 + (the first 8 bytes of SHA-256(case id),
// big-endian) mod N: the same case lands on the same shard whatever else the plan holds, so a case
// does not move when prompts are added. With --replicate-shards every shard runs every case (the same
// plan on each machine of a fleet) and the merge compares the hosts as a factor.
//
// `report merge` (merge_shards) refuses unless every shard 1..N is there exactly once, with the same
// plan digest, tool version and model digest (or endpoints), assignments as the plan gives them and
// disjoint, and a union equal to the plan; each refusal names the shard and the difference.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/audit/plan.hpp"
#include "repro/audit/result.hpp"

namespace repro {

inline constexpr int kMaxShards = 100000;

// K/N with 1 <= K <= N <= kMaxShards: {K, N}; {0, 0} when `text` is not of that form.
struct ShardSpec {
  int index = 0;           // K, 1-based
  int count = 0;           // N
  std::string scheduler;   // "flag", "slurm", "kubernetes", "gitlab", "aws-batch"
  std::string source;      // "--shard 2/4", "SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=4", ...
};
ShardSpec parse_shard(const std::string& text);
std::string shard_text(const ShardSpec& s);  // "K/N"

// `--shard auto`: K/N from the scheduler's variables (read through `getenv`):
//   Slurm       SLURM_ARRAY_TASK_ID (0-based) and SLURM_ARRAY_TASK_COUNT; the array must be 0..N-1
//               (SLURM_ARRAY_TASK_MIN = 0, SLURM_ARRAY_TASK_MAX = N-1);
//   Kubernetes  JOB_COMPLETION_INDEX (0-based) with `shard_count` (--shard-count N: an Indexed Job
//               exports no count);
//   GitLab      CI_NODE_INDEX (1-based) and CI_NODE_TOTAL (`parallel: N`);
//   AWS Batch   AWS_BATCH_JOB_ARRAY_INDEX (0-based) and AWS_BATCH_JOB_ARRAY_SIZE (or --shard-count).
// GitHub Actions exports no matrix index: its recipe passes --shard K/N. Variables half set, not
// numbers, out of range, disagreeing with each other or with --shard-count, or absent altogether are
// a UsageError naming them and the fix: never "shard 1 of 1".
ShardSpec resolve_shard_auto(int shard_count, const std::function<const char*(const char*)>& getenv);

// A case's identity: "prompt_id|decoding|mode|precision" (remote: the endpoint label, precision empty).
std::string case_id(const std::string& prompt_id, const std::string& decoding_id, const std::string& mode,
                    const std::string& precision);
std::string case_id(const Completion& c);
// The shard (1..count) a case belongs to.
int case_shard(const std::string& case_id, int count);
// Every case of the plan, in plan order: prompts x decoding configs x modes x precisions (remote:
// `endpoint_labels` in place of the modes, one empty precision).
std::vector<std::string> plan_case_ids(const PlanOptions& plan, const std::vector<std::string>& endpoint_labels);
// The cases this run runs: all of them without a shard or with replicate_shards, else those whose
// case_shard is the plan's K.
std::vector<std::string> shard_case_ids(const PlanOptions& plan, const std::vector<std::string>& endpoint_labels);

// The plan digest shards of one plan share: SHA-256 of the compact canonical JSON of
// {"plan": the plan block without "shard" and "positions_skipped", "prompts_sha256": prompts digest}.
std::string plan_digest(const nlohmann::json& plan_block, const std::string& prompts_sha256);
// The machine, from an environment record (repro/audit/provenance.hpp): gethostname() and the
// SHA-256 of the record without "model", "endpoints", "remote_stats" and "digests".
ShardHost host_record(const nlohmann::json& environment);

// The shard block of a run's report (after record_provenance: it reads the plan block, the prompts
// digest and the environment).
ShardInfo shard_info(const AuditReport& report, const PlanOptions& plan, const ShardSpec& spec,
                     const std::vector<std::string>& endpoint_labels);
// A shard report that has no cases of a mode (at a precision) leaves that mode out of its summary
// instead of calling it "not run" (src/audit/verdict.cpp); one without any case passes vacuously.
bool shard_lacks(const AuditReport& report, const std::string& mode, const std::string& precision);
bool shard_without_cases(const AuditReport& report);

// `run --dry-run`: the plan digest, the cases per shard and this shard's cases, one per line.
std::string assignment_text(const PlanOptions& plan, const std::vector<std::string>& endpoint_labels,
                            const std::string& plan_sha256);

// One shard report handed to the merge: where it came from and what its digest says.
struct ShardInput {
  std::string file;        // as named on the command line
  std::string text_sha256; // the recorded digests.report_sha256
  AuditReport report;
};
struct MergeOptions {
  bool allow_partial = false;  // missing shards or cases: a report marked incomplete, never a pass
};
// The union as one report, ready for analyze(): plan, prompts and environment of the lowest shard
// (plan block "shard" and "replicate_shards" cleared: the plan as one unsharded run), completions in
// the order an unsharded run records them (replicated: shard by shard, each completion's host set),
// throughput cells pooled, request statistics summed, co-batching evidence pooled by level, and the
// merge block. Throws UsageError naming the shard and the difference.
AuditReport merge_shards(std::vector<ShardInput> shards, const MergeOptions& opt);
// After analyze(): the hosts of replicated shards compared context by context (merge.hosts), and the
// verdict of an incomplete merge, which is never a pass ("incomplete", unless it is "divergent").
void finish_merge(AuditReport& merged);

}  // namespace repro
