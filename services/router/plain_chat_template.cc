#include "services/router/plain_chat_template.h"

namespace pdserve {

std::string RenderPlainChatPrompt(const std::vector<ChatMessage>& messages) {
  std::string system;
  std::string turns;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += m.content;
      system += '\n';
    } else {
      turns += m.role == "user" ? "User: " : "Assistant: ";
      turns += m.content;
      turns += '\n';
    }
  }
  std::string prompt = std::move(system);
  if (!prompt.empty()) prompt += '\n';
  prompt += turns;
  prompt += "Assistant:";
  return prompt;
}

}  // namespace pdserve
