// What pt2serve tells a client, whichever transport carries it: each failure is one kind, mapped once to an HTTP
// status (here) and a gRPC code (grpc_service.cpp), with a message of bounded size; the bounds on what a request
// may make the server parse or echo; the protocol's datatypes and the checks of a request's inputs, which both
// transports share.
#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <pt2rt/pt2rt.h>

namespace pt2serve {

// Nesting of a request's JSON (objects and lists): a tensor of rank 60 sent as nested lists still fits. Deeper
// documents are refused before they are parsed, so nothing that walks them (the parser, printing, copying,
// destroying) can run out of stack.
constexpr size_t kMaxJsonDepth = 64;
// An error message sent to a client, at most: it may quote what the client sent.
constexpr size_t kMaxErrorBytes = 1024;

// A request the server refuses before running it (HTTP 400): what was wrong and what was expected.
struct BadRequest : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A request the server cannot take now (HTTP 503): the queue is full, or the server is stopping.
struct Unavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A request body past the server's limit as it arrives (HTTP 413).
struct TooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A model or version that does not exist (HTTP 404, gRPC NOT_FOUND).
struct NotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class ErrorKind { InvalidArgument, NotFound, Unavailable, TooLarge, Internal };

struct Failure {
  ErrorKind kind;
  std::string message;  // at most kMaxErrorBytes
};

// The exception being handled (call inside a catch block) as a client is told it: BadRequest and pt2rt's Input
// and Usage errors are InvalidArgument, NotFound NotFound, Unavailable Unavailable, TooLarge TooLarge, the rest
// Internal.
Failure current_failure();
int http_status(ErrorKind kind);

// `text` cut to at most `max` bytes (whole UTF-8 characters), saying how long it was when cut.
std::string clip(std::string_view text, size_t max = kMaxErrorBytes);

// Throws BadRequest when the JSON text in [begin, end) nests objects and lists deeper than `max_depth`. A linear
// scan that tracks strings only; malformed text is left to the parser.
void check_json_depth(const char* begin, const char* end, size_t max_depth = kMaxJsonDepth);

// The protocol's datatype names ("FP32", ...); their sizes are pt2rt::dtype_size's.
const char* datatype_name(pt2rt::DType d);

// A request's inputs, checked against the spec as they come - the name known and given once, the datatype the
// model's, the shape's bytes within `max_bytes` (overflow included) - then handed over in the spec's order. Both
// transports use it; every failure is a BadRequest naming the input.
class RequestInputs {
 public:
  struct Slot {
    size_t index = 0;
    pt2rt::DType dtype = pt2rt::DType::Float32;
    std::vector<int64_t> shape;
    size_t count = 0;  // elements
    size_t bytes = 0;
  };
  RequestInputs(const pt2rt::Spec& spec, size_t max_bytes);
  Slot check(const std::string& name, const std::string& datatype, const std::vector<int64_t>& shape);
  // `data` holds slot.bytes bytes.
  void set(const Slot& slot, const void* data);
  std::vector<pt2rt::Tensor> take();

 private:
  const pt2rt::Spec& spec_;
  size_t max_bytes_;
  std::vector<std::optional<pt2rt::Tensor>> tensors_;
};

// The index of output `name` in the spec; BadRequest when it has none of that name.
size_t output_index(const pt2rt::Spec& spec, const std::string& name);

}  // namespace pt2serve
