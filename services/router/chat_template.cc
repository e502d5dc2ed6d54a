#include "services/router/chat_template.h"

namespace pdserve {

std::string RenderChatPrompt(const std::vector<ChatMessage>& messages) {
  std::string system;
  std::string turns;
  for (const ChatMessage& m : messages) {
    switch (m.role) {
      case ChatRole::kSystem:
        system += m.content;
        system += '\n';
        break;
      case ChatRole::kUser:
        turns += "User: ";
        turns += m.content;
        turns += '\n';
        break;
      case ChatRole::kAssistant:
        turns += "Assistant: ";
        turns += m.content;
        turns += '\n';
        break;
    }
  }
  std::string prompt = std::move(system);
  if (!prompt.empty()) prompt += '\n';
  prompt += turns;
  prompt += "Assistant:";
  return prompt;
}

}  // namespace pdserve
