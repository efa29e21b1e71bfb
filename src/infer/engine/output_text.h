// The text of one generation as it grows token by token: incremental detokenization, stop-string
// search over only the tail that a new piece can complete (linear overall, not quadratic), and
// the part that is safe to stream (can no longer be cut by a stop string).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "infer/tokenizer/detokenizer.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer {

class OutputText {
 public:
  // Without a tokenizer the text stays empty and no stop string can match.
  OutputText(const Tokenizer* tokenizer, std::vector<std::string> stop);

  // Appends one generated id; true when a stop string now appears (the text then ends just
  // before its first occurrence, and later calls change nothing).
  bool Add(int32_t id);
  // Ends the stream: flushes what the detokenizer held back. True if that completed a stop.
  bool Finish();

  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }
  // The stop string the text was cut before: of those that appear, the one that starts first
  // (of two starting at the same byte, the one given first). Empty until stopped().
  const std::string& stop_string() const { return stop_string_; }
  // The last tokens end inside a character (their text is held back until it completes).
  bool MidCharacter() const { return detokenizer_ && detokenizer_->HoldsBack(); }
  // The text that became final since the last call: while generating, the last
  // (longest stop - 1) bytes are held back (they may start a stop string), never half a
  // UTF-8 character; after a stop or Finish(), everything left.
  std::string TakeStable();

 private:
  bool Append(const std::string& piece);

  std::unique_ptr<IncrementalDetokenizer> detokenizer_;
  std::vector<std::string> stop_;
  size_t max_stop_bytes_ = 0;
  std::string text_;
  size_t streamed_bytes_ = 0;
  bool stopped_ = false;
  std::string stop_string_;
  bool finished_ = false;
};

}  // namespace infer
