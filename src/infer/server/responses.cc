#include "infer/server/responses.h"

#include <iterator>
#include <random>

#include <fmt/format.h>

#include "infer/server/sse.h"

namespace infer::server {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string HexId(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

}  // namespace

std::string NewResponseId() { return HexId("resp_"); }

// ResponseStore -----------------------------------------------------------------------------

bool ResponseStore::Put(StoredResponse entry) {
  const std::string id = entry.response.value("id", "");
  const size_t bytes =
      entry.response.dump(-1, ' ', false, ordered_json::error_handler_t::replace).size() +
      entry.conversation.dump(-1, ' ', false, ordered_json::error_handler_t::replace).size();
  const std::lock_guard lock(mutex_);
  EraseLocked(id);
  if (max_entries_ == 0 || bytes > max_bytes_) return false;
  while (!order_.empty() && (entries_.size() + 1 > max_entries_ || bytes_ + bytes > max_bytes_)) {
    EraseLocked(order_.front());
  }
  order_.push_back(id);
  entries_[id] = {std::make_shared<const StoredResponse>(std::move(entry)), bytes,
                  std::prev(order_.end())};
  bytes_ += bytes;
  return true;
}

std::shared_ptr<const StoredResponse> ResponseStore::Get(const std::string& id) const {
  const std::lock_guard lock(mutex_);
  const auto found = entries_.find(id);
  return found == entries_.end() ? nullptr : found->second.value;
}

bool ResponseStore::Erase(const std::string& id) {
  const std::lock_guard lock(mutex_);
  const bool present = entries_.contains(id);
  EraseLocked(id);
  return present;
}

void ResponseStore::EraseLocked(const std::string& id) {
  const auto found = entries_.find(id);
  if (found == entries_.end()) return;
  bytes_ -= found->second.bytes;
  order_.erase(found->second.order);
  entries_.erase(found);
}

size_t ResponseStore::size() const {
  const std::lock_guard lock(mutex_);
  return entries_.size();
}

size_t ResponseStore::bytes() const {
  const std::lock_guard lock(mutex_);
  return bytes_;
}

// ResponsesReply --------------------------------------------------------------------------------

ResponsesReply::ResponsesReply(std::shared_ptr<ChatReply> reply, std::string id, std::string model,
                               int64_t created_at, int64_t input_tokens, ResponsesRequest request,
                               ResponseStore* store)
    : reply_(std::move(reply)),
      id_(std::move(id)),
      model_(std::move(model)),
      created_at_(created_at),
      input_tokens_(input_tokens),
      request_(std::move(request)),
      store_(store) {}

std::string ResponsesReply::Event(const std::string& type, const ordered_json& data) {
  ordered_json event = {{"type", type}};
  event.update(data);
  event["sequence_number"] = sequence_number_++;
  return FormatSseEvent(type, event.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
}

std::string ResponsesReply::NewItemId(std::string_view prefix) {
  return fmt::format("{}_{}_{}", prefix, id_.substr(5), next_item_++);
}

ordered_json ResponsesReply::Response(const std::string& status) const {
  ordered_json response = {{"id", id_},
                           {"object", "response"},
                           {"created_at", created_at_},
                           {"status", status},
                           {"background", false},
                           {"error", nullptr},
                           {"incomplete_details", nullptr}};
  if (status == "incomplete") {
    response["incomplete_details"] = {{"reason", "max_output_tokens"}};
  } else if (status == "failed") {
    response["error"] = {{"code", "server_error"}, {"message", error_.value_or("")}};
  }
  response["instructions"] = request_.echo["instructions"];
  response["max_output_tokens"] = request_.echo["max_output_tokens"];
  response["model"] = model_;
  response["output"] = status == "in_progress" ? ordered_json::array() : output_;
  for (const char* key : {"parallel_tool_calls", "previous_response_id", "reasoning", "store",
                          "temperature", "text", "tool_choice", "tools", "top_p", "truncation"}) {
    response[key] = request_.echo.value(key, ordered_json());
  }
  if (status != "in_progress") {
    const ChatUsage usage = reply_->Usage();
    response["usage"] = {{"input_tokens", input_tokens_},
                         {"input_tokens_details", {{"cached_tokens", usage.cached_tokens}}},
                         {"output_tokens", output_tokens_},
                         {"output_tokens_details", {{"reasoning_tokens", usage.reasoning_tokens}}},
                         {"total_tokens", input_tokens_ + output_tokens_}};
  } else {
    response["usage"] = nullptr;
  }
  response["user"] = request_.echo["user"];
  response["metadata"] = request_.echo["metadata"];
  return response;
}

std::string ResponsesReply::Start() {
  std::string events = Event("response.created", {{"response", Response("in_progress")}});
  return events + Event("response.in_progress", {{"response", Response("in_progress")}});
}

std::string ResponsesReply::CloseItem(const std::string& status) {
  if (open_ == Open::kNone) return {};
  const Open kind = open_;
  open_ = Open::kNone;
  ordered_json& item = output_.back();
  item["status"] = status;
  const size_t index = output_.size() - 1;
  const ordered_json& part = item["content"].back();
  const std::string text = part["text"].get<std::string>();
  std::string events;
  const ordered_json where = {
      {"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}};
  if (kind == Open::kReasoning) {
    ordered_json done = where;
    done["text"] = text;
    events += Event("response.reasoning_text.done", done);
  } else {
    ordered_json done = where;
    done["text"] = text;
    done["logprobs"] = ordered_json::array();
    events += Event("response.output_text.done", done);
  }
  ordered_json part_done = where;
  part_done["part"] = part;
  events += Event("response.content_part.done", part_done);
  return events + Event("response.output_item.done", {{"output_index", index}, {"item", item}});
}

std::string ResponsesReply::AppendText(Open kind, const std::string& text) {
  if (text.empty()) return {};
  std::string events;
  if (open_ != kind) {
    events += CloseItem("completed");
    ordered_json item;
    ordered_json part;
    if (kind == Open::kReasoning) {
      item = {{"id", NewItemId("rs")},
              {"type", "reasoning"},
              {"summary", ordered_json::array()},
              {"content", ordered_json::array()},
              {"status", "in_progress"}};
      part = {{"type", "reasoning_text"}, {"text", ""}};
    } else {
      item = {{"id", NewItemId("msg")},
              {"type", "message"},
              {"status", "in_progress"},
              {"role", "assistant"},
              {"content", ordered_json::array()}};
      part = {{"type", "output_text"},
              {"annotations", ordered_json::array()},
              {"logprobs", ordered_json::array()},
              {"text", ""}};
    }
    const size_t index = output_.size();
    events += Event("response.output_item.added", {{"output_index", index}, {"item", item}});
    events += Event(
        "response.content_part.added",
        {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}});
    item["content"].push_back(std::move(part));
    output_.push_back(std::move(item));
    open_ = kind;
  }
  ordered_json& item = output_.back();
  ordered_json& field = item["content"].back()["text"];
  field = field.get<std::string>() + text;
  ordered_json delta = {{"item_id", item["id"]},
                        {"output_index", output_.size() - 1},
                        {"content_index", 0},
                        {"delta", text}};
  if (kind == Open::kReasoning) return events + Event("response.reasoning_text.delta", delta);
  delta["logprobs"] = ordered_json::array();
  return events + Event("response.output_text.delta", delta);
}

std::string ResponsesReply::Translate(const ChatDelta& delta) {
  if (delta.error) {
    error_ = *delta.error;
    return Event("error", {{"code", "server_error"}, {"message", *error_}, {"param", nullptr}});
  }
  std::string events = AppendText(Open::kReasoning, delta.reasoning);  // before the text
  events += AppendText(Open::kMessage, delta.content);
  if (delta.finished) incomplete_ = delta.finish == ChatFinish::kLength;
  if (!delta.tool_calls.empty()) {
    events += CloseItem("completed");
    for (const ToolCall& call : delta.tool_calls) {
      const size_t index = output_.size();
      ordered_json item = {{"id", NewItemId("fc")},   {"type", "function_call"},
                           {"status", "in_progress"}, {"arguments", ""},
                           {"call_id", call.id},      {"name", call.name}};
      events += Event("response.output_item.added", {{"output_index", index}, {"item", item}});
      events +=
          Event("response.function_call_arguments.delta",
                {{"item_id", item["id"]}, {"output_index", index}, {"delta", call.arguments}});
      events += Event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                                {"output_index", index},
                                                                {"name", item["name"]},
                                                                {"arguments", call.arguments}});
      item["arguments"] = call.arguments;
      item["status"] = "completed";
      events += Event("response.output_item.done", {{"output_index", index}, {"item", item}});
      output_.push_back(std::move(item));
    }
  }
  if (delta.finished) events += CloseItem(incomplete_ ? "incomplete" : "completed");
  return events;
}

std::string ResponsesReply::Add(const StepOutput& output) {
  if (!output.error) output_tokens_ = output.completion_tokens;
  std::string events;
  for (const ChatDelta& delta : reply_->Add(output)) events += Translate(delta);
  if (reply_->finished() && !error_ && request_.store && store_ != nullptr) {
    StoredResponse stored{Final(), request_.conversation};
    for (const ordered_json& item : output_) stored.conversation.push_back(item);
    store_->Put(std::move(stored));
  }
  return events;
}

std::string ResponsesReply::End() {
  if (error_) return Event("response.failed", {{"response", Response("failed")}});
  return incomplete_ ? Event("response.incomplete", {{"response", Response("incomplete")}})
                     : Event("response.completed", {{"response", Response("completed")}});
}

ordered_json ResponsesReply::Final() const {
  if (error_) return Response("failed");
  return Response(incomplete_ ? "incomplete" : "completed");
}

}  // namespace infer::server
