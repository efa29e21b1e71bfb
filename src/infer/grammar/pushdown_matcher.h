// The byte-level pushdown matcher of a grammar (grammar.h). The grammar is flattened into one
// array of positions (an element, or the end of an alternative). A matcher state is a SET of
// stacks (the grammar is nondeterministic); stacks are persistent linked lists of return
// positions, hash-consed in a pool, so the stacks of a state share their tails and a state is
// just a sorted list of top-node ids plus a "root may end here" flag. Calls in tail position
// do not push a frame (`star ::= x star` keeps the stack flat however long the repetition),
// and every walk is an explicit worklist, so deep nesting never recurses natively.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "infer/grammar/grammar.h"

namespace infer::grammar {

// The grammar as the matcher walks it. Immutable once built; shared by every matcher.
struct FlatGrammar {
  static constexpr int32_t kEnd = -1;  // op of the position after an alternative's last element
  // Per position: >= 0 a byte set id (a terminal position), kEnd, or <= -2 the rule -(op + 2).
  std::vector<int32_t> op;
  std::vector<int32_t> alt_begin;  // per rule r: its alternatives are alt_start[alt_begin[r] ..
  std::vector<int32_t> alt_start;  //   alt_begin[r + 1]), each the position of its first element
  std::vector<ByteSet> byte_sets;
  int32_t root = 0;

  explicit FlatGrammar(const Grammar& grammar);
  static bool IsRule(int32_t op) { return op <= -2; }
  static int32_t RuleOf(int32_t op) { return -op - 2; }
};

// Hash-consed stack nodes: (position, parent node). Parents below 0 are sentinels.
class StackPool {
 public:
  static constexpr int32_t kBottom = -1;   // below the root: popping here completes the grammar
  static constexpr int32_t kUnknown = -2;  // precomputation: the stack below is not known

  struct Node {
    int32_t pos;
    int32_t parent;
  };

  StackPool();
  int32_t Intern(int32_t pos, int32_t parent);
  const Node& operator[](int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }

 private:
  void Grow();
  std::vector<Node> nodes_;
  std::vector<int32_t> slots_;  // open addressing, -1 empty
  uint32_t shift_ = 0;
};

// A set of stacks, closed: every top points at a terminal position.
struct StackSet {
  std::vector<int32_t> tops;  // sorted node ids
  bool complete = false;      // a stack popped below the root: the grammar can end here
  bool escaped = false;       // a stack popped into kUnknown (precomputation only)
  bool operator==(const StackSet&) const = default;
};

// A bound on the work of one operation (one token's mask, one accepted token, one grammar's
// compile): the stacks that all its closures visit together, counted per thread while a
// StepBudget lives (nested ones leave the count to the outermost). Past it, Close throws
// GrammarError. kMaxClosure bounds one closure; a state of tens of thousands of stacks, each
// closed on its own for one mask, still took minutes (gbnf_fuzz: `[a-z]*+++...*?*`), and a
// grammar from a request must not stall the batch it decodes in.
class StepBudget {
 public:
  // `what` names the operation in the error ("one step", "the compile"): a static string.
  StepBudget(size_t max_stacks, const char* what);
  ~StepBudget();
  StepBudget(const StepBudget&) = delete;
  StepBudget& operator=(const StepBudget&) = delete;
  // Counts `stacks` against the open budget (none open: nothing counted).
  static void Charge(size_t stacks);

 private:
  bool outermost_;
};

// The step functions over a pool; `scratch` state reused between calls to avoid allocation.
class Stepper {
 public:
  Stepper(const FlatGrammar& grammar, StackPool& pool) : g_(grammar), pool_(pool) {}
  // The closure of the stacks whose top is `node`s (any positions). Throws GrammarError past
  // kMaxClosure stacks: nested repetitions ((x*)*...) multiply the stacks of one step
  // exponentially, and a grammar from a request must not hang the server (the JSON and schema
  // grammars stay below a few thousand).
  static constexpr size_t kMaxClosure = size_t{1} << 17;
  void Close(const int32_t* seeds, size_t n, StackSet& out);
  // Consumes byte `b` from `in`; out may be empty (b rejected).
  void Advance(const StackSet& in, uint8_t b, StackSet& out);
  // The initial state: the root rule called on `parent` (kBottom at run time).
  StackSet Start(int32_t parent);
  // A stack set whose only stack is a terminal position with an unknown rest (precomputation).
  StackSet AtPosition(int32_t pos);
  // The union of the byte sets at the tops.
  ByteSet NextBytes(const StackSet& s) const;

  // Walks over a vocabulary (token_mask.cc) step through interned states, a lazily built DFA
  // over stack sets: the stacks are hash-consed, so the same state and byte always lead to the
  // same state, and a walk reaches the same few states by many prefixes (inside a string, every
  // token's first characters lead to one state per count of characters), each step after the
  // first a table lookup.
  int32_t InternState(const StackSet& s);
  const StackSet& StateOf(int32_t id) const { return states_[static_cast<size_t>(id)]; }
  // Per interned state, what a walk asks of it at every step, without reading its stacks.
  static constexpr uint8_t kAlive = 1;     // tops not empty
  static constexpr uint8_t kEscaped = 2;   // StackSet::escaped
  static constexpr uint8_t kComplete = 4;  // StackSet::complete
  uint8_t FlagsOf(int32_t id) const { return flags_[static_cast<size_t>(id)]; }
  // The state after byte `b` (one whose tops are empty when b is rejected).
  int32_t Next(int32_t state, uint8_t b) {
    const size_t edge = static_cast<size_t>(state) * 256 + b;
    if (edge < edges_.size() && edges_[edge] >= 0) return edges_[edge];
    return NextSlow(state, b);
  }
  // Forgets the interned states once past a bound; ids from before are then invalid (call
  // only between walks).
  void TrimStates();

 private:
  const FlatGrammar& g_;
  StackPool& pool_;
  std::vector<uint32_t> stamp_;
  uint32_t generation_ = 0;
  std::vector<int32_t> work_;
  std::vector<int32_t> seeds_;
  static constexpr size_t kMaxStates = size_t{1} << 14;  // kept from walk to walk
  static constexpr int32_t kEdgeStates = (1 << 15) - 1;  // with cached steps (ids fit 16 bits)
  int32_t NextSlow(int32_t state, uint8_t b);
  std::vector<StackSet> states_;
  std::vector<uint8_t> flags_;  // per state: kAlive | kEscaped | kComplete
  std::vector<uint64_t> state_hashes_;
  std::vector<int32_t> state_slots_;  // open addressing over states_ (-1 empty)
  StackSet next_;
  std::vector<int16_t> edges_;  // 256 per state: the next state, -1 not yet known
};

// A matcher over bytes with a history of checkpoints for rollback.
class ByteMatcher {
 public:
  explicit ByteMatcher(std::shared_ptr<const FlatGrammar> grammar);
  // False (and no change) when the byte or the whole string cannot come next.
  bool AcceptByte(uint8_t b);
  bool AcceptString(std::string_view bytes);
  bool IsComplete() const { return state_.complete; }
  bool CanContinue() const { return !state_.tops.empty(); }
  // Saves the current state; Rollback(n) returns to the state saved n checkpoints ago (and
  // forgets those n checkpoints).
  void Checkpoint() { history_.push_back(state_); }
  void Rollback(int n);
  size_t NumCheckpoints() const { return history_.size(); }

  const StackSet& state() const { return state_; }
  void set_state(StackSet state) { state_ = std::move(state); }
  const FlatGrammar& grammar() const { return *grammar_; }
  StackPool& pool() { return pool_; }
  Stepper& stepper() { return stepper_; }

 private:
  std::shared_ptr<const FlatGrammar> grammar_;
  StackPool pool_;
  Stepper stepper_;
  StackSet state_;
  StackSet next_;
  std::vector<StackSet> history_;
};

}  // namespace infer::grammar
