#pragma once
// A model file's identity, for two processes that each open their own copy of a file (a pipeline
// across hosts, docs/distributed.md) and must agree that it is the same one.
#include <string>

namespace hotcold {

// "SIZE-HASH": the file's size in bytes and a 64-bit FNV-1a hash (16 hex digits) of its first MiB
// (the GGUF header, metadata and tensor table of any real file) and of 64 KiB at each of 64 offsets
// spread evenly over the rest (the weights: two files of the same shape but other values differ
// there). Reads about 5 MiB, whatever the file's size. std::runtime_error naming the file when it
// cannot be read.
std::string file_identity(const std::string& path);

}  // namespace hotcold
