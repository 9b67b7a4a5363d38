// Server-Sent Events: the writer of one event and the incremental parser.
#include "repro/openai/sse.hpp"

#include "repro/openai/request.hpp"

namespace repro {

std::string sse_event(const nlohmann::json& data) { return "data: " + dump(data) + "\n\n"; }


void SseParser::feed(std::string_view chunk, std::vector<std::string>& out) {
  size_t i = 0;
  while (i < chunk.size()) {
    if (last_cr_) {
      last_cr_ = false;
      if (chunk[i] == '\n') {  // the LF of a CRLF split across chunks
        ++i;
        continue;
      }
    }
    size_t e = chunk.find_first_of("\r\n", i);
    if (e == std::string_view::npos) {
      if (buf_.size() + (chunk.size() - i) > max_line_) {
        if (error_.empty()) error_ = "SSE line longer than " + std::to_string(max_line_) + " bytes";
        buf_.clear();
      } else {
        buf_.append(chunk.substr(i));
      }
      return;
    }
    if (buf_.empty()) {
      line(chunk.substr(i, e - i), out);
    } else {
      if (buf_.size() + (e - i) > max_line_) {
        if (error_.empty()) error_ = "SSE line longer than " + std::to_string(max_line_) + " bytes";
        buf_.clear();
      } else {
        buf_.append(chunk.substr(i, e - i));
        line(buf_, out);
      }
      buf_.clear();
    }
    if (chunk[e] == '\r') {
      if (e + 1 < chunk.size()) {
        i = chunk[e + 1] == '\n' ? e + 2 : e + 1;
      } else {
        last_cr_ = true;
        i = e + 1;
      }
    } else {
      i = e + 1;
    }
  }
}

void SseParser::line(std::string_view l, std::vector<std::string>& out) {
  if (l.empty()) {
    if (has_data_) out.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l[0] == ':') return;  // comment / keep-alive
  size_t colon = l.find(':');
  std::string_view field = l.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = l.substr(colon + 1);
    if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  }
  if (field != "data") return;  // event, id, retry: not used by OpenAI streams
  if (has_data_) data_.push_back('\n');
  if (data_.size() + value.size() > max_line_) {
    if (error_.empty()) error_ = "SSE event longer than " + std::to_string(max_line_) + " bytes";
    return;
  }
  data_.append(value);
  has_data_ = true;
}

}  // namespace repro
