// What pt2serve tells a client, whichever transport carries it: each failure is one kind, mapped once to an HTTP
// status (here) and a gRPC code (grpc_service.cpp), with a message of bounded size; and the bounds on what a
// request may make the server parse or echo.
#pragma once

#include <cstddef>
#include <exception>
#include <string>
#include <string_view>

namespace pt2serve {

// Nesting of a request's JSON (objects and lists): a tensor of rank 60 sent as nested lists still fits. Deeper
// documents are refused before they are parsed, so nothing that walks them (the parser, printing, copying,
// destroying) can run out of stack.
constexpr size_t kMaxJsonDepth = 64;
// An error message sent to a client, at most: it may quote what the client sent.
constexpr size_t kMaxErrorBytes = 1024;

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

}  // namespace pt2serve
