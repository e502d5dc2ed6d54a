#include "services/router/plain_chat_template.h"

#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(PlainChatTemplateTest, SystemTextThenTurnsThenAssistantCue) {
  const std::vector<ChatMessage> messages = {
      {"user", "Hi"},
      {"system", "Tell short stories."},
      {"assistant", "Hello!"},
      {"user", "A story about a cat."},
  };
  EXPECT_EQ(RenderPlainChatPrompt(messages),
            "Tell short stories.\n\nUser: Hi\nAssistant: Hello!\nUser: A story about a "
            "cat.\nAssistant:");
}

TEST(PlainChatTemplateTest, NoSystemMessage) {
  EXPECT_EQ(RenderPlainChatPrompt({{"user", "Once"}}), "User: Once\nAssistant:");
}

}  // namespace
}  // namespace pdserve
