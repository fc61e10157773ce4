// Package exact holds graph operations whose results are the same bits on every backend, where
// the backends' own operations differ in their last bits (XLA fuses multiply-adds, divides by a
// broadcast value through its reciprocal and has its own Pow): ProductSum, PowInt, RoundHalfUp;
// random numbers from integer and exact float operations (RandomKey, RandomBits, RandomNormal);
// ties, exact zeros that connect or order nodes without changing a value (ZeroTiedTo,
// NegativeZeroFrom); and the wide dtype 16-bit values are summed in (WideDType, SumInFloat32).
package exact
