#include "services/router/chat_template.h"

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(ChatTemplateTest, SystemTextThenTurnsThenAssistantCue) {
  const std::vector<ChatMessage> messages = {
      {ChatRole::kUser, "Hi"},
      {ChatRole::kSystem, "Tell short stories."},
      {ChatRole::kAssistant, "Hello!"},
      {ChatRole::kUser, "A story about a cat."},
  };
  EXPECT_EQ(RenderChatPrompt(messages),
            "Tell short stories.\n\nUser: Hi\nAssistant: Hello!\nUser: A story about a "
            "cat.\nAssistant:");
}

TEST(ChatTemplateTest, NoSystemMessage) {
  EXPECT_EQ(RenderChatPrompt({{ChatRole::kUser, "Once"}}), "User: Once\nAssistant:");
}

}  // namespace
}  // namespace pdserve
