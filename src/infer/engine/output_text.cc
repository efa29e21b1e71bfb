#include "infer/engine/output_text.h"

#include <algorithm>

namespace infer {

OutputText::OutputText(const Tokenizer* tokenizer, std::vector<std::string> stop)
    : stop_(std::move(stop)) {
  if (tokenizer != nullptr) {
    detokenizer_ = std::make_unique<IncrementalDetokenizer>(*tokenizer,
                                                            /*skip_special_tokens=*/true);
  }
  for (const std::string& text : stop_) max_stop_bytes_ = std::max(max_stop_bytes_, text.size());
}

bool OutputText::Add(int32_t id) {
  if (stopped_ || finished_ || !detokenizer_) return stopped_;
  return Append(detokenizer_->Add(id));
}

bool OutputText::Finish() {
  if (stopped_ || finished_) return stopped_;
  finished_ = true;
  return detokenizer_ ? Append(detokenizer_->Finish()) : false;
}

bool OutputText::Append(const std::string& piece) {
  if (piece.empty()) return false;
  const size_t old_size = text_.size();
  text_ += piece;
  if (stop_.empty()) return false;
  // Earlier text held no stop string, so a match must end inside `piece`: it starts at most
  // (longest stop - 1) bytes before it.
  const size_t window_begin =
      old_size >= max_stop_bytes_ - 1 ? old_size - (max_stop_bytes_ - 1) : 0;
  size_t first = std::string::npos;
  const std::string* matched = nullptr;
  for (const std::string& stop : stop_) {
    const size_t at = text_.find(stop, window_begin);
    if (at < first) {
      first = at;
      matched = &stop;
    }
  }
  if (matched == nullptr) return false;
  text_.resize(first);
  stop_string_ = *matched;
  stopped_ = true;
  return true;
}

std::string OutputText::TakeStable() {
  size_t end = text_.size();
  if (!stopped_ && !finished_ && max_stop_bytes_ > 0) {
    end = end >= max_stop_bytes_ - 1 ? end - (max_stop_bytes_ - 1) : 0;
    while (end > streamed_bytes_ && end < text_.size() &&
           (static_cast<unsigned char>(text_[end]) & 0xC0U) == 0x80U) {
      --end;  // do not split a UTF-8 character
    }
  }
  if (end <= streamed_bytes_) return {};
  std::string stable = text_.substr(streamed_bytes_, end - streamed_bytes_);
  streamed_bytes_ = end;
  return stable;
}

}  // namespace infer
