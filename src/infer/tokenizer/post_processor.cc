// Post-processor implementations.
#include "infer/tokenizer/post_processor.h"

#include "infer/core/error.h"

namespace infer {
namespace {

class NoOp : public PostProcessor {
 public:
  void Process(std::vector<int32_t>&, bool) const override {}
};

class Template : public PostProcessor {
 public:
  explicit Template(const nlohmann::json& config) {
    std::map<std::string, std::vector<int32_t>> special_ids;
    if (config.contains("special_tokens")) {
      for (const auto& [name, entry] : config["special_tokens"].items())
        special_ids[name] = entry.at("ids").get<std::vector<int32_t>>();
    }
    bool has_sequence = false;
    for (const auto& piece : config.at("single")) {
      if (piece.contains("Sequence")) {
        INFER_CHECK(piece["Sequence"].at("id").get<std::string>() == "A",
                    "TemplateProcessing: single template must use sequence A");
        INFER_CHECK(!has_sequence, "TemplateProcessing: sequence A appears twice");
        has_sequence = true;
      } else if (piece.contains("SpecialToken")) {
        const std::string name = piece["SpecialToken"].at("id").get<std::string>();
        auto it = special_ids.find(name);
        INFER_CHECK(it != special_ids.end(), "TemplateProcessing: unknown special token '{}'",
                    name);
        (has_sequence ? suffix_ : prefix_)
            .insert((has_sequence ? suffix_ : prefix_).end(), it->second.begin(), it->second.end());
      } else {
        Fail("TemplateProcessing: unknown template piece {}", piece.dump());
      }
    }
    INFER_CHECK(has_sequence, "TemplateProcessing: single template lacks sequence A");
  }
  void Process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

// RobertaProcessing / BertProcessing: cls A sep.
class ClsSep : public PostProcessor {
 public:
  explicit ClsSep(const nlohmann::json& config)
      : cls_(config.at("cls").at(1).get<int32_t>()), sep_(config.at("sep").at(1).get<int32_t>()) {}
  void Process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    ids.insert(ids.begin(), cls_);
    ids.push_back(sep_);
  }

 private:
  int32_t cls_, sep_;
};

class Sequence : public PostProcessor {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  void Process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    for (const auto& step : steps_) step->Process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

}  // namespace

std::unique_ptr<PostProcessor> CreatePostProcessor(const nlohmann::json& config) {
  if (config.is_null()) return std::make_unique<NoOp>();
  INFER_CHECK(config.is_object() && config.contains("type"), "post_processor: missing \"type\"");
  const std::string type = config["type"].get<std::string>();
  try {
    if (type == "ByteLevel") return std::make_unique<NoOp>();  // only changes offsets
    if (type == "TemplateProcessing") return std::make_unique<Template>(config);
    if (type == "RobertaProcessing" || type == "BertProcessing")
      return std::make_unique<ClsSep>(config);
    if (type == "Sequence") {
      std::vector<std::unique_ptr<PostProcessor>> steps;
      for (const auto& step : config.at("processors")) steps.push_back(CreatePostProcessor(step));
      return std::make_unique<Sequence>(std::move(steps));
    }
  } catch (const nlohmann::json::exception& e) {
    Fail("post_processor {}: {}", type, e.what());
  }
  Fail("post_processor type '{}' is not supported", type);
}

}  // namespace infer
