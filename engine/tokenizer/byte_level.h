// GPT-2's byte-level alphabet: every byte gets a printable code point so that BPE vocabularies
// can be plain strings. Printable Latin-1 bytes map to themselves; the other 68 bytes map, in
// order, to U+0100 onwards.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace llm::tokenizer_internal {

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& Get();

  // Appends the UTF-8 of the code point standing for each byte of `bytes`.
  void Encode(std::string_view bytes, std::string* out) const {
    for (unsigned char b : bytes) out->append(encoded_[b].data(), encoded_length_[b]);
  }
  // The byte a code point stands for, or -1 when it is not in the alphabet.
  int DecodeCodePoint(char32_t code_point) const {
    return code_point < decoded_.size() ? decoded_[code_point] : -1;
  }

 private:
  ByteLevelAlphabet();

  std::array<std::array<char, 2>, 256> encoded_;  // each stand-in is one or two UTF-8 bytes
  std::array<uint8_t, 256> encoded_length_;
  std::array<int16_t, 324> decoded_;  // stand-ins are all below U+0144
};

}  // namespace llm::tokenizer_internal
