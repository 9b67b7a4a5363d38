// The replica panel: several endpoints serving one model (replicas behind a load balancer, two
// engine versions) compared per case. Each endpoint's most frequent output is set against the
// panel's majority output (the output most endpoints give; ties go to the earlier endpoint), and an
// endpoint that leaves it is placed at the first token (or character, when ids are unknown) where it does.
#pragma once
#include <string>
#include <vector>

#include "repro/audit/result.hpp"

namespace repro {

// Fills report.panel from the analysed cases when two or more endpoints ran (empty otherwise).
void analyze_panel(AuditReport& report);

}  // namespace repro
