// simpler: the orchestration API under the original's header name, so
// existing orchestration sources (`#include "pto_orchestration_api.h"`) port
// unchanged. See orchestration.h.
#ifndef SIMPLER_PTO_ORCHESTRATION_API_H
#define SIMPLER_PTO_ORCHESTRATION_API_H
#include "orchestration.h"
#endif
