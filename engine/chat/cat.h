// String concatenation over std::string_view. Debian's Abseil has a string_view type of its own
// that std::string_view does not convert to, so absl::StrCat cannot take the std::string_view
// this module uses throughout; Cat and CatAppend take strings, views, C strings and integers.
#pragma once

#include <concepts>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace llm::chat {

namespace cat_internal {
inline void Append(std::string* out, std::string_view s) { out->append(s); }
template <typename T>
  requires std::same_as<T, absl::string_view>
void Append(std::string* out, const T& s) {
  out->append(s.data(), s.size());
}
template <typename T>
  requires(std::integral<T> && !std::same_as<T, char> && !std::same_as<T, bool>)
void Append(std::string* out, T v) {
  out->append(std::to_string(v));
}
}  // namespace cat_internal

template <typename... T>
void CatAppend(std::string* out, const T&... parts) {
  (cat_internal::Append(out, parts), ...);
}

template <typename... T>
std::string Cat(const T&... parts) {
  std::string out;
  CatAppend(&out, parts...);
  return out;
}

// For Abseil functions that take its string_view.
inline absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace llm::chat
