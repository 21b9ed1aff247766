#include "engine/tokenizer/byte_level.h"

#include "engine/tokenizer/utf8.h"

namespace llm::tokenizer_internal {

const ByteLevelAlphabet& ByteLevelAlphabet::Get() {
  static const ByteLevelAlphabet* const kAlphabet = new ByteLevelAlphabet();
  return *kAlphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  decoded_.fill(-1);
  const auto keeps_itself = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  char32_t next_stand_in = 0x100;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = keeps_itself(b) ? static_cast<char32_t>(b) : next_stand_in++;
    std::string utf8;
    AppendCodePoint(cp, &utf8);
    encoded_length_[b] = static_cast<uint8_t>(utf8.size());
    encoded_[b] = {utf8[0], utf8.size() > 1 ? utf8[1] : '\0'};
    decoded_[cp] = static_cast<int16_t>(b);
  }
}

}  // namespace llm::tokenizer_internal
