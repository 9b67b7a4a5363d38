// The OpenAI-compatible wire format, defined once and shared by the client (src/remote) and the
// server (src/serve): the request (request.hpp: writer and parser, the error object), the response
// and its stream chunks (response.hpp: writer and parsers) and Server-Sent Events (sse.hpp).
// Plain functions and small types; no I/O. Nothing here knows about endpoints, audits or reports.
#pragma once
#include "repro/openai/request.hpp"
#include "repro/openai/response.hpp"
#include "repro/openai/sse.hpp"
