// Incremental detokenizer for streaming: turns a growing id sequence into text pieces that are
// stable (never half a UTF-8 character, never revised); the pieces concatenate to Decode(all ids).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "infer/tokenizer/tokenizer.h"

namespace infer {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Appends one id; returns the text that became stable (often empty, sometimes several chars).
  std::string Add(int32_t id);
  // Call once at the end of the stream: returns whatever Add has held back.
  std::string Finish();

  const std::vector<int32_t>& ids() const { return ids_; }
  // Some ids' text is held back: half a UTF-8 character, or a byte run still open.
  bool HoldsBack() const { return read_offset_ < ids_.size(); }

 private:
  std::string DecodeRange(size_t begin, size_t end) const;

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  // ids_[prefix_offset_, read_offset_) were emitted and are decoded again as context, so that
  // decoders that look at neighbours (leading-space stripping, byte runs) stay consistent.
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  int32_t last_visible_id_ = -1;
};

}  // namespace infer
