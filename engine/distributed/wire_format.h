// The flat little-endian byte strings of the control plane (step messages, sample results, the
// worker protocol): a Writer appends fixed-size values and length-prefixed vectors, a Reader takes
// them back and says false instead of reading past the end.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace llm::wire {

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) { out_.clear(); }
  template <typename T>
  void Put(const T& v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <typename T>
  void PutVector(absl::Span<const T> v) {
    Put<uint32_t>(static_cast<uint32_t>(v.size()));
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void PutString(std::string_view s) { PutVector<char>(absl::MakeConstSpan(s.data(), s.size())); }

 private:
  std::string& out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T& v) {
    if (pos_ + sizeof(T) > in_.size()) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  template <typename T>
  bool GetVector(std::vector<T>& v) {
    uint32_t n;
    if (!Get(n) || pos_ + size_t{n} * sizeof(T) > in_.size()) return false;
    v.resize(n);
    std::memcpy(v.data(), in_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return true;
  }
  bool GetString(std::string& s) {
    uint32_t n;
    if (!Get(n) || pos_ + n > in_.size()) return false;
    s.assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace llm::wire
