#pragma once
// A sequence slot's cached rows in a file, as llama-server's slot save and restore: what `serve
// --slot-save-path DIR` writes (POST /slots/{id}?action=save) and reads back (action=restore) so
// that a conversation's cache outlives the server or moves to another slot.
//
// The file: "HCSLOT01" (8 bytes), a u32 (little-endian) byte count, that many bytes of JSON header
// {"model": the model file's identity (model/file_identity), "cache_type_k" and "cache_type_v": "f32"|
// "f16"|"q8_0"|"q4_0", "n_layer", "k_row_bytes" and "v_row_bytes" (one position's keys, or values, of one
// layer), "n_tokens"}, the tokens (i32 each), then layer by layer the keys' rows and the values' rows
// of those positions. A restore checks the header against this server (model, cache types, shape,
// context) and refuses a file by name otherwise.
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/kv_cache.hpp"

namespace hotcold::actors {

// Writes positions 0 .. tokens.size() - 1 of `slot` with their tokens; returns the bytes written.
// std::runtime_error naming the file when it cannot be written.
uint64_t save_slot(const kv_cache& kv, const std::string& model_identity, int64_t slot, std::span<const token_id> tokens, const std::string& path);

// A slot file that cannot be opened (not there, not readable).
struct slot_file_missing : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads a file into `slot` from position 0; returns its tokens and sets `bytes` to the bytes read.
// slot_file_missing when it cannot be opened; std::runtime_error naming the file and what does not match.
std::vector<token_id> restore_slot(kv_cache& kv, const std::string& model_identity, int64_t slot, const std::string& path, uint64_t& bytes);

}  // namespace hotcold::actors
