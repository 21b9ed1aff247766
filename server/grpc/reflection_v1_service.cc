#include "server/grpc/reflection_v1_service.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <mutex>
#include <set>

namespace llm::server {
namespace {

namespace refl = grpc::reflection::v1;
namespace pb = google::protobuf;

// `file` and, before it, everything it imports (each once).
void AddFile(const pb::FileDescriptor* file, std::set<std::string>* seen, refl::FileDescriptorResponse* out) {
  if (!seen->insert(file->name()).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), seen, out);
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
}

void NotFound(const std::string& what, refl::ServerReflectionResponse* response) {
  refl::ErrorResponse* error = response->mutable_error_response();
  error->set_error_code(static_cast<int>(grpc::StatusCode::NOT_FOUND));
  error->set_error_message(what + " not found");
}

// One stream: reads a request, writes its answer, reads the next, until the client ends it.
class Reactor final : public grpc::ServerBidiReactor<refl::ServerReflectionRequest, refl::ServerReflectionResponse> {
 public:
  explicit Reactor(const ReflectionV1Service& service) : service_(service) { StartRead(&request_); }

  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);
    response_ = service_.Answer(request_);
    StartWrite(&response_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status(grpc::StatusCode::UNKNOWN, "write failed"));
    StartRead(&request_);
  }
  void OnDone() override { delete this; }

 private:
  const ReflectionV1Service& service_;
  refl::ServerReflectionRequest request_;
  refl::ServerReflectionResponse response_;
};

}  // namespace

grpc::ServerBidiReactor<refl::ServerReflectionRequest, refl::ServerReflectionResponse>*
ReflectionV1Service::ServerReflectionInfo(grpc::CallbackServerContext* /*context*/) {
  return new Reactor(*this);
}

refl::ServerReflectionResponse ReflectionV1Service::Answer(const refl::ServerReflectionRequest& request) const {
  const pb::DescriptorPool* pool = pb::DescriptorPool::generated_pool();
  refl::ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  std::set<std::string> seen;
  switch (request.message_request_case()) {
    case refl::ServerReflectionRequest::kListServices:
      for (const std::string& name : services_) response.mutable_list_services_response()->add_service()->set_name(name);
      break;
    case refl::ServerReflectionRequest::kFileByFilename:
      if (const pb::FileDescriptor* file = pool->FindFileByName(request.file_by_filename())) {
        AddFile(file, &seen, response.mutable_file_descriptor_response());
      } else {
        NotFound("file " + request.file_by_filename(), &response);
      }
      break;
    case refl::ServerReflectionRequest::kFileContainingSymbol:
      if (const pb::FileDescriptor* file = pool->FindFileContainingSymbol(request.file_containing_symbol())) {
        AddFile(file, &seen, response.mutable_file_descriptor_response());
      } else {
        NotFound("symbol " + request.file_containing_symbol(), &response);
      }
      break;
    case refl::ServerReflectionRequest::kFileContainingExtension: {
      const auto& ext = request.file_containing_extension();
      const pb::Descriptor* type = pool->FindMessageTypeByName(ext.containing_type());
      const pb::FieldDescriptor* field = type ? pool->FindExtensionByNumber(type, ext.extension_number()) : nullptr;
      if (field) {
        AddFile(field->file(), &seen, response.mutable_file_descriptor_response());
      } else {
        NotFound("extension " + std::to_string(ext.extension_number()) + " of " + ext.containing_type(), &response);
      }
      break;
    }
    case refl::ServerReflectionRequest::kAllExtensionNumbersOfType:
      if (const pb::Descriptor* type = pool->FindMessageTypeByName(request.all_extension_numbers_of_type())) {
        std::vector<const pb::FieldDescriptor*> extensions;
        pool->FindAllExtensions(type, &extensions);
        refl::ExtensionNumberResponse* out = response.mutable_all_extension_numbers_response();
        out->set_base_type_name(type->full_name());
        for (const pb::FieldDescriptor* f : extensions) out->add_extension_number(f->number());
      } else {
        NotFound("type " + request.all_extension_numbers_of_type(), &response);
      }
      break;
    case refl::ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET: {
      refl::ErrorResponse* error = response.mutable_error_response();
      error->set_error_code(static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      error->set_error_message("the request asks nothing");
      break;
    }
  }
  return response;
}

}  // namespace llm::server
