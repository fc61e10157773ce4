package quant

// A code is a sorted table of levels in [-1, 1]: a value x of a block with largest magnitude s is
// stored as the index of the level nearest x/s, and read back as level·s. Encoding is
// bitsandbytes' (its reference kernels and its CUDA NF4 kernel): x·(1/s) in float32, clamped to
// [-1, 1], then the number of midpoints between neighbouring levels that lie strictly below it
// (torch.bucketize against float32 midpoints): the nearest level, a value exactly on a midpoint
// going to the lower one.
type code struct {
	levels    []float32
	midpoints []float32 // (levels[i] + levels[i+1]) / 2 in float32, as bitsandbytes computes them
}

func newCode(levels []float32) code {
	mid := make([]float32, len(levels)-1)
	for i := range mid {
		mid[i] = float32(levels[i]+levels[i+1]) * 0.5
	}
	return code{levels: levels, midpoints: mid}
}

// index returns the index of the level nearest scaled (already clamped to [-1, 1]): the number of
// midpoints below it.
func (c code) index(scaled float32) uint8 {
	m := c.midpoints
	if len(m) == 15 {
		// NF4: a count without branches (a binary search's four unpredictable branches cost
		// more than fifteen comparisons).
		var n uint8
		for _, x := range m[:15] {
			n += b2u(x < scaled)
		}
		return n
	}
	lo, hi := 0, len(m)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if m[h] < scaled {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return uint8(lo)
}

// b2u is 1 for true and 0 for false (compiled to a flag set, not a branch).
func b2u(b bool) uint8 {
	var u uint8
	if b {
		u = 1
	}
	return u
}

// NF4Levels are the 16 levels of 4-bit NormalFloat (Dettmers et al. 2023, "QLoRA"): quantiles of
// the standard normal distribution scaled to [-1, 1], with an exact zero, 7 negative and 8
// positive levels. They are bitsandbytes' table (functional.get_4bit_type("nf4")) bit for bit;
// the code of a level is its index, 7 for zero.
var NF4Levels = [16]float32{
	-1, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
	-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0,
	0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
	0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1,
}

// dynamicPositive are the 127 positive levels below 1 of bitsandbytes' signed 8-bit dynamic map
// (functional.create_dynamic_map(signed=True): a decimal exponent from 10⁻⁶ to 10⁰, and 1, 2, 4
// ... 64 linear fractions for each), as float32 values torch computed them; the map is these
// negated in reverse order, 0, these, and 1.
var dynamicPositive = [127]float32{
	5.5000004e-07, 3.2500002e-06, 7.75e-06, 2.1249998e-05, 4.375e-05, 6.625e-05, 8.875e-05, 0.00015625001,
	0.00026875004, 0.00038125002, 0.00049375003, 0.0006062501, 0.00071875006, 0.00083125, 0.0009437501, 0.0012812499,
	0.00184375, 0.00240625, 0.00296875, 0.0035312497, 0.00409375, 0.0046562497, 0.0052187503, 0.00578125,
	0.00634375, 0.00690625, 0.00746875, 0.00803125, 0.00859375, 0.009156249, 0.00971875, 0.01140625,
	0.01421875, 0.01703125, 0.019843752, 0.02265625, 0.02546875, 0.028281251, 0.03109375, 0.03390625,
	0.036718752, 0.03953125, 0.042343747, 0.04515625, 0.04796875, 0.05078125, 0.05359375, 0.05640625,
	0.059218753, 0.06203125, 0.06484375, 0.067656256, 0.070468746, 0.07328125, 0.07609375, 0.07890625,
	0.08171876, 0.08453125, 0.08734375, 0.09015625, 0.092968754, 0.09578126, 0.09859375, 0.107031256,
	0.12109375, 0.13515624, 0.14921875, 0.16328125, 0.17734376, 0.19140625, 0.20546874, 0.21953125,
	0.23359375, 0.24765624, 0.26171875, 0.27578127, 0.28984374, 0.30390626, 0.31796873, 0.33203125,
	0.34609374, 0.36015624, 0.37421876, 0.38828123, 0.40234375, 0.41640624, 0.43046874, 0.44453126,
	0.45859373, 0.47265625, 0.4867187, 0.50078124, 0.5148437, 0.5289062, 0.54296875, 0.5570313,
	0.5710938, 0.58515626, 0.5992187, 0.61328125, 0.6273438, 0.6414063, 0.65546876, 0.6695312,
	0.68359375, 0.6976563, 0.7117188, 0.72578126, 0.7398437, 0.75390625, 0.7679688, 0.78203124,
	0.79609376, 0.8101562, 0.82421875, 0.8382813, 0.85234374, 0.86640626, 0.8804687, 0.89453125,
	0.9085938, 0.92265624, 0.93671876, 0.9507812, 0.96484375, 0.9789063, 0.99296874,
}

// DynamicMap returns bitsandbytes' signed 8-bit dynamic map, the code QLoRA's double quantization
// stores the block scales in (quantize_blockwise's default code, which compress_statistics uses):
// 256 sorted levels from -0.99296874 to 1 with 0 at index 127, dense near zero (the smallest
// magnitude 5.5e-7), so that scales far below a scale block's largest keep their precision.
func DynamicMap() [256]float32 {
	var m [256]float32
	for i, v := range dynamicPositive {
		m[126-i] = -v
		m[128+i] = v
	}
	m[255] = 1
	return m
}

// int8Levels are the 255 levels k/127, k = -127..127, of the linear 8-bit code (Int8): index k+127.
func int8Levels() []float32 {
	l := make([]float32, 255)
	for i := range l {
		l[i] = float32(float64(i-127) / 127)
	}
	return l
}

var (
	nf4Code     = newCode(NF4Levels[:])
	dynamicMap  = DynamicMap()
	dynamicCode = newCode(dynamicMap[:])
	int8Code    = newCode(int8Levels())
)
