// The web chat page served at GET / (chat_page.html, embedded into the binary at configure
// time): streaming replies through /v1/chat/completions, a stop button, sampling settings, TTFT
// and tokens/s, the conversation kept in the page. No build step: plain HTML and JavaScript.
#pragma once

#include <string_view>

namespace infer::server {

std::string_view ChatPageHtml();

}  // namespace infer::server
