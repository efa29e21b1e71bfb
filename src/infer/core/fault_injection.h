// Failure points for tests of what happens when something that "cannot fail" does: armed only by
// the INFER_FAULTS environment variable, read once (or by Arm() in a test's own process); when
// nothing is armed a check costs one atomic load. The server tests start `infer serve` with it to
// make a forward pass throw in the middle of a batch, or a KV block allocation fail, and check that
// the affected requests end with an error event while the others and the server go on.
//
//   INFER_FAULTS="forward@3"        the 3rd forward pass throws
//   INFER_FAULTS="forward@3x2"      the 3rd and 4th throw
//   INFER_FAULTS="forward@3,kv_alloc@10"   several points, comma-separated
//
// Points: forward (ModelRunner, before the model's batched call), kv_alloc (BlockManager, a new
// block for a sequence). A malformed INFER_FAULTS is an error at the first check.
#pragma once

#include <string_view>

namespace infer::fault {

// Counts one pass through `point`; true when this pass is armed to fail.
bool Hit(std::string_view point);

// Replaces the armed points with `spec` (INFER_FAULTS's syntax; empty disarms), with fresh
// counts: for tests that run the engine in their own process.
void Arm(std::string_view spec);

// Throws infer::Error("injected fault: <point>") when Hit(point) says so.
void MaybeThrow(std::string_view point);

}  // namespace infer::fault
