// Server-Sent Events as OpenAI streams use them: the server writes one `data:` event per chunk and
// `data: [DONE]` last; the client's parser takes any chunking and line ends.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace repro {

// "data: <compact JSON>\n\n" (invalid UTF-8 replaced, as dump() does).
std::string sse_event(const nlohmann::json& data);
// The stream's last event.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Incremental Server-Sent-Events parser: any chunking, LF / CRLF / CR line ends, comments (":"),
// multi-line data fields (joined by "\n"), fields other than data ignored. Each complete event's
// data is appended to `out`. A line longer than max_line bytes sets error().
class SseParser {
 public:
  explicit SseParser(size_t max_line = 8u << 20) : max_line_(max_line) {}
  void feed(std::string_view chunk, std::vector<std::string>& out);
  const std::string& error() const { return error_; }

 private:
  void line(std::string_view l, std::vector<std::string>& out);
  std::string buf_, data_, error_;
  bool has_data_ = false, last_cr_ = false;
  size_t max_line_;
};

}  // namespace repro
