// The one table of plan options. Each row names an option once: its type, its `run` flag, its
// profile key, its key in the report's "plan" block, its default (PlanOptions' initial value), its
// valid values and its help text. The table drives:
//   - the flags of `repro-audit run` (src/cli/cmd_run.cpp adds one CLI option per row),
//   - profile parsing (apply_profile),
//   - the report's "plan" block (plan_to_json),
//   - --resume (plan_from_report reads the plan block back through the same checks),
//   - validate_plan (every row's range, whatever set the value).
// A new plan option is one PlanOptions member plus one row in src/audit/plan_options.cpp.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "repro/audit/plan.hpp"

namespace repro {

// Json: a JSON value; its flag names a file holding it (--json-schema FILE), a profile holds it inline.
enum class OptionType { Int, UInt, Number, Bool, Text, IntList, UIntList, NumberList, TextList, Json };

struct PlanOption {
  const char* name;         // PlanOptions member, for documentation: "top_ps"
  OptionType type;
  const char* flag;         // CLI11 names of the `run` flag ("-n,--repeats"); "" = profile only
  const char* profile_key;  // dotted for nested objects: "thresholds.min_tarr"
  const char* report_key;   // key in the report's "plan" block, dotted the same way
  const char* help;
  // A Bool option's flag sets it to this value (--no-cache-probe sets cache_probe to false).
  bool flag_sets = true;

  // The value as JSON (lists as arrays). The default is get(PlanOptions{}).
  nlohmann::json (*get)(const PlanOptions&) = nullptr;
  // Stores a value that check() accepted.
  void (*set)(PlanOptions&, const nlohmann::json&) = nullptr;
  // One value (one list entry for list types) that is valid, else false. `valid` says what is.
  bool (*valid_value)(const nlohmann::json&) = nullptr;
  const char* valid;        // "an integer from 1 to 1000000", "default, batch-invariant or deterministic"
  bool may_be_empty = false;  // list types: an empty list is valid (thresholds.modes: all modes)

  // The flag's long name ("--repeats").
  std::string flag_name() const;
  // Settings of the local engine only (modes, precisions, batch sizes, positions, fillers, batch
  // mates, generated prompts, threads): a remote run's report leaves them out of its plan block, and
  // reading that block back gives them their defaults.
  bool local_only() const;
};

// Every plan option, in the order of `run --help`.
const std::vector<PlanOption>& plan_options();
// The row with this profile key (or report key), or nullptr.
const PlanOption* find_plan_option_by_key(const std::string& key);

// Checks a value for `opt` (a JSON value: from a profile, a report, or parse_flag_value) and
// returns it normalised (a list option given one scalar becomes a one-entry list). `where` names
// the source for the error: "--repeats", "profile 'p.json': key \"repeats\"". A value of the wrong
// type, NaN, negative where not allowed, or out of range is a UsageError:
//   "<where> must be <valid> (got <value>)".
nlohmann::json check_plan_value(const PlanOption& opt, const nlohmann::json& value, const std::string& where);
// A flag's text as JSON for check_plan_value: numbers parsed strictly, lists comma-separated, a Json
// option's file read and parsed (UsageError naming the flag and the file).
nlohmann::json parse_flag_value(const PlanOption& opt, const std::string& text);

}  // namespace repro
