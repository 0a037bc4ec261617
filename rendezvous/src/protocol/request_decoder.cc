#include "protocol/request_decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace ddprun::rendezvous::protocol {

void Request::clear() {
  keys.clear();
  values.clear();
  integer = 0;
  word = 0;
}

RequestDecoder::RequestDecoder(ProtocolLimits limits, std::optional<WireDialect> dialect)
    : limits_(limits), dialect_(dialect) {}

const RequestDecoder::Layout& RequestDecoder::layoutOf(Op op) {
  using F = Field;
  static const Layout kNothing{{}, 0, {}, 0};
  static const Layout kWord{{F::kWord}, 1, {}, 0};
  static const Layout kKey{{F::kKey}, 1, {}, 0};
  static const Layout kKeyValue{{F::kKey, F::kValue}, 2, {}, 0};
  static const Layout kKeyInteger{{F::kKey, F::kInteger}, 2, {}, 0};
  static const Layout kCompareSet{{F::kKey, F::kValue, F::kValue}, 3, {}, 0};
  static const Layout kKeys{{F::kCount}, 1, {F::kKey}, 1};
  static const Layout kPairs{{F::kCount}, 1, {F::kKey, F::kValue}, 2};
  static const Layout kHold{{F::kKey, F::kValue, F::kWord, F::kKey, F::kValue}, 5, {}, 0};
  switch (op) {
    case Op::kValidate:
    case Op::kPing:
      return kWord;
    case Op::kSet:
    case Op::kAppend:
    case Op::kQueuePush:
      return kKeyValue;
    case Op::kCompareSet:
      return kCompareSet;
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
    case Op::kQueuePop:
    case Op::kQueueLen:
    case Op::kRelease:
    case Op::kDeletePrefix:
      return kKey;
    case Op::kHold:
      return kHold;
    case Op::kAdd:
    case Op::kBarrier:
    case Op::kListPrefix:
      return kKeyInteger;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      return kKeys;
    case Op::kMultiSet:
      return kPairs;
    case Op::kNumKeys:
    case Op::kCancelWait:
    case Op::kListKeys:
      return kNothing;
  }
  return kNothing;
}

RequestDecoder::Status RequestDecoder::fail(std::string message) {
  error_ = std::move(message);
  return Status::kError;
}

RequestDecoder::Field RequestDecoder::currentField() const {
  return inItems_ ? layout_->item[itemIndex_] : layout_->head[headIndex_];
}

RequestDecoder::Status RequestDecoder::startOp(std::uint8_t code) {
  request_.clear();
  requestBytes_ = 0;
  std::optional<Op> op = opFromWire(*dialect_, code);
  if (!op) {
    return fail(
        fmt::format("unknown op 0x{:02x} on a {} connection", code, dialectName(*dialect_)));
  }
  request_.op = *op;
  layout_ = &layoutOf(*op);
  headIndex_ = 0;
  itemIndex_ = 0;
  inItems_ = false;
  if (layout_->headSize == 0) {
    stage_ = Stage::kOpByte;
    return Status::kRequest;
  }
  return beginField();
}

// Starts reading the current field: every field begins with 4 or 8 fixed bytes.
RequestDecoder::Status RequestDecoder::beginField() {
  stage_ = Stage::kFixed;
  scratchLen_ = 0;
  scratchNeed_ = currentField() == Field::kWord ? 4 : 8;
  return Status::kNeedMore;
}

// The fixed bytes of the current field are in scratch_: store the integer, or check a blob's
// length / an item count against the limits before anything is allocated for it.
RequestDecoder::Status RequestDecoder::finishFixedField() {
  const Field field = currentField();
  switch (field) {
    case Field::kWord:
      request_.word = getU32(scratch_);
      return nextField();
    case Field::kInteger:
      request_.integer = static_cast<std::int64_t>(getU64(scratch_));
      return nextField();
    case Field::kCount: {
      const std::uint64_t count = getU64(scratch_);
      if (count > limits_.maxKeysPerRequest) {
        return fail(fmt::format("{} names {} keys, over the limit of {}", opName(request_.op),
                                count, limits_.maxKeysPerRequest));
      }
      itemsLeft_ = count;
      return nextField();
    }
    case Field::kKey:
    case Field::kValue: {
      const std::uint64_t length = getU64(scratch_);
      const bool isKey = field == Field::kKey;
      const std::size_t limit = isKey ? limits_.maxKeyBytes : limits_.maxValueBytes;
      if (length > limit) {
        if (sniffedSet_) {
          return fail(fmt::format(
              "first frame is neither a torch 2.x VALIDATE (magic 0x{:08x}) nor a torch 1.13 SET "
              "within limits (key length {} > {})",
              kValidationMagic, length, limit));
        }
        return fail(fmt::format("{} {} length {} exceeds the {}-byte limit", opName(request_.op),
                                isKey ? "key" : "value", length, limit));
      }
      requestBytes_ += length;
      if (requestBytes_ > maxRequestBytes()) {
        return fail(
            fmt::format("{} carries more than {} bytes of keys and values, over the "
                        "request limit",
                        opName(request_.op), maxRequestBytes()));
      }
      sniffedSet_ = false;
      auto& list = isKey ? request_.keys : request_.values;
      list.emplace_back();
      blob_ = &list.back();
      blobLeft_ = length;
      if (length == 0) return nextField();
      stage_ = Stage::kBlobBytes;
      return Status::kNeedMore;
    }
  }
  return nextField();
}

// Moves past the field just completed: the next head field, the next item field, or the end.
RequestDecoder::Status RequestDecoder::nextField() {
  if (!inItems_) {
    ++headIndex_;
    if (headIndex_ < layout_->headSize) return beginField();
    if (layout_->itemSize == 0 || itemsLeft_ == 0) {
      stage_ = Stage::kOpByte;
      return Status::kRequest;
    }
    inItems_ = true;
    itemIndex_ = 0;
    return beginField();
  }
  ++itemIndex_;
  if (itemIndex_ < layout_->itemSize) return beginField();
  if (--itemsLeft_ == 0) {
    stage_ = Stage::kOpByte;
    return Status::kRequest;
  }
  itemIndex_ = 0;
  return beginField();
}

bool RequestDecoder::decodeWhole(const unsigned char*& data, const unsigned char* end) {
  const std::optional<Op> op = opFromWire(*dialect_, *data);
  if (!op) return false;
  const Layout& layout = layoutOf(*op);
  const unsigned char* cursor = data + 1;
  std::size_t keyCount = 0;
  std::size_t valueCount = 0;
  // Pass 1: is it all here, and within the limits? Nothing is written yet.
  auto walk = [&](Field field) -> bool {
    const std::size_t available = static_cast<std::size_t>(end - cursor);
    if (field == Field::kWord) {
      if (available < 4) return false;
      cursor += 4;
      return true;
    }
    if (available < 8) return false;
    const std::uint64_t n = getU64(cursor);
    cursor += 8;
    if (field == Field::kInteger || field == Field::kCount) return true;
    const bool isKey = field == Field::kKey;
    if (n > (isKey ? limits_.maxKeyBytes : limits_.maxValueBytes) || n > available - 8)
      return false;
    cursor += n;
    ++(isKey ? keyCount : valueCount);
    // Over the request limit: the field-by-field path refuses it with its message.
    return static_cast<std::size_t>(cursor - data) <= maxRequestBytes();
  };
  std::uint64_t items = 0;
  for (std::uint8_t i = 0; i < layout.headSize; ++i) {
    if (!walk(layout.head[i])) return false;
    if (layout.head[i] == Field::kCount) items = getU64(cursor - 8);
  }
  if (layout.itemSize > 0) {
    if (items > limits_.maxKeysPerRequest) return false;
    for (std::uint64_t n = 0; n < items; ++n) {
      for (std::uint8_t i = 0; i < layout.itemSize; ++i) {
        if (!walk(layout.item[i])) return false;
      }
    }
  }
  // Pass 2: fill the request, reusing the strings' storage from the previous request.
  request_.op = *op;
  request_.integer = 0;
  request_.word = 0;
  fitList(request_.keys, keyCount);
  fitList(request_.values, valueCount);
  keyCount = 0;
  valueCount = 0;
  cursor = data + 1;
  auto fill = [&](Field field) {
    switch (field) {
      case Field::kWord:
        request_.word = getU32(cursor);
        cursor += 4;
        return;
      case Field::kInteger:
        request_.integer = static_cast<std::int64_t>(getU64(cursor));
        cursor += 8;
        return;
      case Field::kCount:
        cursor += 8;
        return;
      case Field::kKey:
      case Field::kValue: {
        const std::size_t n = static_cast<std::size_t>(getU64(cursor));
        std::string& target =
            field == Field::kKey ? request_.keys[keyCount++] : request_.values[valueCount++];
        target.assign(reinterpret_cast<const char*>(cursor + 8), n);
        cursor += 8 + n;
        return;
      }
    }
  };
  for (std::uint8_t i = 0; i < layout.headSize; ++i) fill(layout.head[i]);
  for (std::uint64_t n = 0; n < items; ++n) {
    for (std::uint8_t i = 0; i < layout.itemSize; ++i) fill(layout.item[i]);
  }
  data = cursor;
  return true;
}

void RequestDecoder::fitList(std::vector<std::string>& list, std::size_t count) {
  // Strings a request does not need wait in spare_ for the next one that does, so that a
  // connection alternating requests with and without values (SET, ADD, COMPARE_SET, WAIT...)
  // stops allocating once each string has its size. Only a few small ones: a MULTI_SET of many
  // keys or a large value must not stay with the connection.
  constexpr std::size_t kMaxSpare = 8;
  constexpr std::size_t kMaxSpareCapacity = 4096;
  while (list.size() > count) {
    if (spare_.size() < kMaxSpare && list.back().capacity() <= kMaxSpareCapacity) {
      spare_.push_back(std::move(list.back()));
    }
    list.pop_back();
  }
  while (list.size() < count) {
    if (spare_.empty()) {
      list.emplace_back();
    } else {
      list.push_back(std::move(spare_.back()));
      spare_.pop_back();
    }
  }
}

RequestDecoder::Status RequestDecoder::decode(const unsigned char*& data,
                                              const unsigned char* end) {
  if (stage_ == Stage::kOpByte && dialect_ && data < end && decodeWhole(data, end)) {
    return Status::kRequest;
  }
  while (data < end) {
    Status status = Status::kNeedMore;
    switch (stage_) {
      case Stage::kOpByte: {
        const std::uint8_t code = *data++;
        if (!dialect_) {
          if (code == 0) {
            // VALIDATE (2.x) or SET (1.13): the next 4 bytes tell.
            stage_ = Stage::kSniffMagic;
            scratchLen_ = 0;
            continue;
          }
          dialect_ = WireDialect::kTorch113;
        }
        status = startOp(code);
        break;
      }
      case Stage::kSniffMagic: {
        const std::size_t take = std::min<std::size_t>(4 - scratchLen_, end - data);
        std::memcpy(scratch_ + scratchLen_, data, take);
        scratchLen_ = static_cast<std::uint8_t>(scratchLen_ + take);
        data += take;
        if (scratchLen_ < 4) return Status::kNeedMore;
        if (getU32(scratch_) == kValidationMagic) {
          dialect_ = WireDialect::kTorch2;
          request_.clear();
          request_.op = Op::kValidate;
          request_.word = kValidationMagic;
          stage_ = Stage::kOpByte;
          return Status::kRequest;
        }
        // A 1.13 SET whose 8-byte key length began with these 4 bytes.
        dialect_ = WireDialect::kTorch113;
        const unsigned char sniffed[4] = {scratch_[0], scratch_[1], scratch_[2], scratch_[3]};
        status = startOp(torch113::kSet);
        std::memcpy(scratch_, sniffed, 4);
        scratchLen_ = 4;
        sniffedSet_ = true;
        break;
      }
      case Stage::kFixed: {
        if (scratchLen_ == 0 && static_cast<std::size_t>(end - data) >= scratchNeed_) {
          std::memcpy(scratch_, data, scratchNeed_);  // the whole field at once: the common case
          data += scratchNeed_;
          scratchLen_ = scratchNeed_;
        } else {
          const std::size_t take = std::min<std::size_t>(scratchNeed_ - scratchLen_, end - data);
          std::memcpy(scratch_ + scratchLen_, data, take);
          scratchLen_ = static_cast<std::uint8_t>(scratchLen_ + take);
          data += take;
        }
        if (scratchLen_ < scratchNeed_) return Status::kNeedMore;
        status = finishFixedField();
        break;
      }
      case Stage::kBlobBytes: {
        const std::size_t take = static_cast<std::size_t>(
            std::min<std::uint64_t>(blobLeft_, static_cast<std::uint64_t>(end - data)));
        blob_->append(reinterpret_cast<const char*>(data), take);
        data += take;
        blobLeft_ -= take;
        if (blobLeft_ > 0) return Status::kNeedMore;
        status = nextField();
        break;
      }
    }
    if (status != Status::kNeedMore) return status;
  }
  return Status::kNeedMore;
}

}  // namespace ddprun::rendezvous::protocol
