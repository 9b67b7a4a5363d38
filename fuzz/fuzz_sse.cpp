// libFuzzer target: SSE parsing and OpenAI response parsing (src/openai/sse.cpp, response.cpp).
// Builds from its own short source list (this file, src/openai/ and src/remote/redact.cpp), see
// docs/FUZZING-remote.md. tests/unit-remote.cpp includes this file with REPRO_FUZZ_NO_MAIN and
// replays fuzz/corpus/sse/ through sse_one_input() as a regression test.
//
// Input layout: byte 0 selects chat/completions and the chunking seed; the rest is the body. The
// body is fed to SseParser in chunks whose sizes come from a tiny LCG seeded by byte 0 (so CR/LF
// pairs and multi-byte UTF-8 get split everywhere), events go through StreamAccumulator, and the
// whole body is also parsed as a non-streamed response, an error body and a Retry-After value.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "repro/openai/protocol.hpp"
#include "repro/remote/redact.hpp"

namespace repro::fuzz {

inline int sse_one_input(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const bool chat = sel & 1;
  std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);

  SseParser sse(4096);
  StreamAccumulator acc(chat);
  std::vector<std::string> events;
  uint32_t lcg = sel * 2654435761u + 1;
  size_t off = 0;
  while (off < body.size()) {
    lcg = lcg * 1664525u + 1013904223u;
    size_t n = 1 + (lcg >> 24) % 17;
    if (n > body.size() - off) n = body.size() - off;
    sse.feed(body.substr(off, n), events);
    off += n;
    for (auto& e : events) acc.add_event(e);
    events.clear();
  }
  acc.finish();
  auto& r = acc.result();
  if (r.cause == FailCause::none && r.finish_reason.empty() && !r.saw_done) __builtin_trap();

  // Same bytes in one piece must give the same events as the chunked feed.
  SseParser one(4096);
  std::vector<std::string> all, chunked;
  one.feed(body, all);
  SseParser two(4096);
  for (size_t i = 0; i < body.size(); ++i) two.feed(body.substr(i, 1), chunked);
  if (one.error().empty() && two.error().empty() && all != chunked) __builtin_trap();

  ParsedResponse p = parse_response_json(body, chat);
  if (p.cause == FailCause::none && p.error.size()) __builtin_trap();
  (void)error_message_from_body(body);
  (void)parse_retry_after(body.substr(0, 64), 1700000000);
  (void)redact_url(std::string(body.substr(0, 256)));
  return 0;
}

}  // namespace repro::fuzz

#ifndef REPRO_FUZZ_NO_MAIN
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return repro::fuzz::sse_one_input(data, size);
}
#endif
