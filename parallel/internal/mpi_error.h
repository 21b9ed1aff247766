// Internal: MPI return codes to absl::Status. Includes mpi.h; never include from a public header.
#pragma once

#include <mpi.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace llm::internal {

inline std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return absl::StrCat("MPI error ", code);
  return std::string(text, len);
}

// Status of one MPI call: statement text, file and line with the library's message.
inline absl::Status MpiStatus(int code, const char* stmt, const char* file, int line) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(stmt, " failed at ", file, ":", line, ": ", MpiErrorString(code)));
}

}  // namespace llm::internal

// Returns an Internal status from the enclosing function when the MPI call fails.
#define LLM_MPI_CHECK(stmt)                                                                         \
  do {                                                                                              \
    ::absl::Status llm_mpi_status_ = ::llm::internal::MpiStatus((stmt), #stmt, __FILE__, __LINE__); \
    if (!llm_mpi_status_.ok()) return llm_mpi_status_;                                              \
  } while (0)
