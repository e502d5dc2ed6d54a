// The plain chat template: how /v1/chat/completions turns a conversation into one text prompt for
// a model that ships no template of its own (pdserve's reference model, stories260K, a tiny Llama
// trained on TinyStories, was never tuned for chat). Models with a template use it instead
// (core/chat/chat_template.h). The plain one (docs/openai-api.md):
//
//   <system message 1>\n
//   <system message 2>\n            (system messages first, in order, each on its own line(s))
//   \n                              (one blank line after the system text, when there is any)
//   User: <text>\n
//   Assistant: <text>\n
//   ...                             (user and assistant turns in their order)
//   Assistant:                      (no trailing space: the model's first token carries it)
//
// Generation stops at kPlainChatStopString ("\nUser:"), where the model would begin the next user
// turn. Pure functions; thread-safe.
#ifndef PDSERVE_SERVICES_ROUTER_PLAIN_CHAT_TEMPLATE_H_
#define PDSERVE_SERVICES_ROUTER_PLAIN_CHAT_TEMPLATE_H_

#include <string>
#include <vector>

#include "core/chat/chat_template.h"

namespace pdserve {

// Added to a chat request's stop strings: the start of the next user turn.
inline constexpr char kPlainChatStopString[] = "\nUser:";

// The prompt for `messages` (roles "system", "user", "assistant"; system messages gathered at the
// top whatever their position).
std::string RenderPlainChatPrompt(const std::vector<ChatMessage>& messages);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_PLAIN_CHAT_TEMPLATE_H_
