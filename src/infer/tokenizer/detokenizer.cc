// The prefix/read-offset scheme of TGI and vLLM, plus holding text while a byte-fallback run is
// open, so emitted text is never revised.
#include "infer/tokenizer/detokenizer.h"

#include <span>

namespace infer {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::DecodeRange(size_t begin, size_t end) const {
  return tokenizer_.Decode(std::span<const int32_t>(ids_).subspan(begin, end - begin),
                           skip_special_tokens_);
}

std::string IncrementalDetokenizer::Add(int32_t id) {
  ids_.push_back(id);
  // Ids that Decode drops (unknown, or skipped specials) are transparent: a byte run can continue
  // across them, so what matters is the last id that produces text.
  const bool visible =
      tokenizer_.IdToToken(id).has_value() && !(skip_special_tokens_ && tokenizer_.IsSpecial(id));
  if (visible) last_visible_id_ = id;
  if (last_visible_id_ >= 0 && tokenizer_.JoinsWithNext(last_visible_id_)) return "";
  const std::string prefix_text = DecodeRange(prefix_offset_, read_offset_);
  std::string new_text = DecodeRange(prefix_offset_, ids_.size());
  // A trailing U+FFFD is usually a character whose remaining bytes are still to come.
  if (new_text.size() <= prefix_text.size() || new_text.ends_with(kReplacementCharacter) ||
      !new_text.starts_with(prefix_text)) {
    return "";
  }
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return new_text.substr(prefix_text.size());
}

std::string IncrementalDetokenizer::Finish() {
  const std::string prefix_text = DecodeRange(prefix_offset_, read_offset_);
  const std::string new_text = DecodeRange(prefix_offset_, ids_.size());
  prefix_offset_ = read_offset_ = ids_.size();
  if (!new_text.starts_with(prefix_text)) return "";
  return new_text.substr(prefix_text.size());
}

}  // namespace infer
