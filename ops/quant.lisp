;;; Linear quantization (ONNX QuantizeLinear/DequantizeLinear, opsets 10-25) and the integer matmul
;;; and convolution (MatMulInteger, ConvInteger): 8/16-bit integers, products summed in i32.
;;; A scale or zero point is per tensor (one element), per axis (a vector along :axis) or blocked
;;; (X's shape but ceil(d / :block-size) along :axis, each entry covering :block-size elements).

(composite quant-param ((P{T}[...] X{U}[...]) -> (Y{T}[...]) &key (axis 1) (block-size 0))
  "the quantization parameter P (scale or zero point: per tensor, per :axis, or blocks of :block-size along :axis) as a view that broadcasts against X"
  (if (same-dim? (count P) 1)
      (VIEW P :reshape [])
      (let ((r (rank X))
            (ax (axis X axis)))
        (if (> block-size 0)
            (let ((d (dim X ax))
                  (nb (dim P ax))
                  (A (count P (range ax)))
                  (B (count P (range (+ ax 1) r))))
              (assert (= (rank P) r) "a blocked scale or zero point has the data's rank, got rank" (rank P) "for" r)
              (assert (and (known? nb) (known? d))
                      "blocked quantization needs static sizes along axis" ax ", got" d "and" nb)
              (assert (same-dim? nb (idiv (+ d (- block-size 1)) block-size))
                      "a blocked scale or zero point needs ceil(" d "/" block-size ") entries along axis" ax ", got" nb)
              (VIEW (VIEW (VIEW (expand (VIEW P :reshape [A nb 1 B]) [A nb block-size B])
                                :reshape [A (* nb block-size) B])
                          :shrink [[0 A] [0 d] [0 B]])
                    :reshape (shape X)))
            (progn
              (assert (= (rank P) 1) "a per-axis scale or zero point is a vector, got rank" (rank P))
              (assert (same-dim? (dim P 0) (dim X ax))
                      "a per-axis scale or zero point of" (dim P 0) "entries for axis" ax "of size" (dim X ax))
              (VIEW P :reshape (cons (dim P 0) (repeat 1 (- r (+ ax 1))))))))))

;;; Zero points are keywords (:zero-point, :a-zero-point ...), tensors of the quantized dtype: absent,
;;; they are 0 (symmetric quantization).

(composite quantize ((X{T}[...] S{T}[...]) -> (Y{D}[...])
                     &key (zero-point nil) (dtype nil) (axis 1) (block-size 0) (qmin nil) (qmax nil))
  "saturate(round_half_even(X / S) + zero point) in the zero point's dtype or :dtype (u8, i8, u16, i16, i4, u4; default u8); :qmin/:qmax narrow the range (int2 carried in i8)"
  :vjp ((dY) nil)
  (assert (float? X) "quantize: X must be a float tensor, got" (dtype X))
  (if (and (not (nil? zero-point)) (not (nil? dtype)))
      (assert (= (bits zero-point) (bits dtype)) "quantize: the zero point's dtype" (dtype zero-point) "differs from :dtype" dtype))
  ;; numpy's rint(x / scale).astype(int32) + zero_point, clipped: the quotient rounded in X's dtype,
  ;; clamped to +-2**20 (beyond any 16-bit range with any zero point, so the int32 sum is exact and
  ;; saturates); nan gives the zero point
  (let ((Z (if (nil? zero-point) (zeros [] :dtype (if (nil? dtype) u8 dtype)) zero-point))
        (ok (assert (and (int? Z) (<= (bits Z) 16))
                    "quantize: the output dtype (the zero point's) is u8, i8, u16, i16, i4 or u4, got" (dtype Z)))
        (q (round (/ X (quant-param S X :axis axis :block-size block-size))))
        (w (if (< (bits X) 32) (cast q f32) q))
        (c (min (max w -1048576.0) 1048576.0))
        (qi (cast (where (!= c c) 0.0 c) i32))
        (zi (cast (quant-param Z X :axis axis :block-size block-size) i32))
        (z0 (zeros [] :dtype (dtype Z)))
        (signed (< (- z0 1) z0))
        (lo (if (nil? qmin) (where signed (full [] (if (= (bits Z) 4) -8 (if (= (bits Z) 8) -128 -32768)) :dtype i32)
                                   (zeros [] :dtype i32))
                (full [] qmin :dtype i32)))
        (hi (if (nil? qmax) (where signed (full [] (if (= (bits Z) 4) 7 (if (= (bits Z) 8) 127 32767)) :dtype i32)
                                   (full [] (if (= (bits Z) 4) 15 (if (= (bits Z) 8) 255 65535)) :dtype i32))
                (full [] qmax :dtype i32))))
    (cast (min (max (+ qi zi) lo) hi) (dtype Z))))

(composite dequantize ((Q{U}[...] S{T}[...]) -> (Y{T}[...]) &key (zero-point nil) (axis 1) (block-size 0))
  "(Q - zero point) * S in S's dtype, as ONNX's reference: Q - zero point in f32 (f64 for i32 Q), the product in f32 (f64 for an f64 S), then rounded to S's dtype"
  (assert (float? S) "dequantize: the scale must be a float tensor, got" (dtype S))
  (let ((Z (if (nil? zero-point) (zeros [] :dtype (dtype Q)) zero-point))
        (ok (assert (= (bits Z) (bits Q)) "dequantize: the zero point's dtype" (dtype Z) "differs from Q's" (dtype Q)))
        (wide (or (= (bits S) 64) (and (int? Q) (= (bits Q) 32))))
        (d (if (and (int? Q) (= (bits Q) 32))
               (- (cast (cast Q f32) f64) (cast (quant-param Z Q :axis axis :block-size block-size) f64))
               (- (cast Q f32) (cast (quant-param Z Q :axis axis :block-size block-size) f32))))
        (s (quant-param S Q :axis axis :block-size block-size)))
    (cast (if wide (* (cast d f64) (cast s f64)) (* d (cast s f32))) (dtype S))))

(composite matmul-int ((A{T}[...] B{U}[...]) -> (C{i32}[...]) &key (a-zero-point nil) (b-zero-point nil))
  "ONNX MatMulInteger: (A - :a-zero-point) @ (B - :b-zero-point) of integers with numpy's matmul rules, products summed in i32 (wrapping as int32); a zero point broadcasts against its operand (a [N] one of B is per column)"
  :vjp ((dC) nil)
  (assert (and (int? A) (int? B)) "matmul-int needs integer operands, got" (dtype A) "and" (dtype B))
  (let ((a (cast A i32))
        (b (cast B i32)))
    (matmul (if (nil? a-zero-point) a (- a (cast a-zero-point i32)))
            (if (nil? b-zero-point) b (- b (cast b-zero-point i32))))))

(composite conv2d-int ((X{T}[...] W{U}[...]) -> (Y{i32}[...])
                       &key (x-zero-point nil) (w-zero-point nil) (stride 1) (padding 0) (dilation 1) (groups 1))
  "ONNX ConvInteger: conv2d of (X - :x-zero-point) and (W - :w-zero-point) summed in i32; the input's zero point per tensor, the filter's per tensor or per output channel ([O]); padding reads the zero point"
  :vjp ((dY) nil)
  (assert (and (int? X) (int? W)) "conv2d-int needs integer operands, got" (dtype X) "and" (dtype W))
  (let ((x (cast X i32))
        (w (cast W i32))
        (wz (if (nil? w-zero-point) nil
                (if (same-dim? (count w-zero-point) 1) (VIEW w-zero-point :reshape [])
                    (VIEW w-zero-point :reshape [(dim w-zero-point 0) 1 1 1]))))
        (xc (if (nil? x-zero-point) x (- x (cast (VIEW x-zero-point :reshape []) i32))))
        (wc (if (nil? wz) w (- w (cast wz i32)))))
    (if (and (= (bits X) 8) (= (bits W) 8))
        ;; 8-bit data: the centered windows fit 16 bits, stored once as an i16 im2col matrix (k
        ;; rows, output positions contiguous) that the integer GEMM over 16-bit pairs packs by
        ;; plain row copies; the GEMM reading the windows in place packed each element through
        ;; the window's index arithmetic (a 64-channel 56x56 3x3 layer: 10.4 ms, 22 GOP/s)
        (let ((p (pair padding))
              (N (dim X 0)) (O (dim W 0)) (CG (dim W 1)) (KH (dim W 2)) (KW (dim W 3)) (OG (idiv O groups))
              (xp (cast (VIEW xc :pad [[0 0] [0 0] [(nth p 0) (nth p 0)] [(nth p 1) (nth p 1)]]) i16))
              (win (windows xp :kernel [KH KW] :stride stride :dilation dilation :groups groups))
              (OH (dim win 3)) (OW (dim win 4))
              (cols (contiguous (VIEW win :permute [0 1 2 5 6 3 4])))
              (P (VIEW cols :reshape [N groups (* CG KH KW) (* OH OW)]))
              (Wm (VIEW (cast wc i16) :reshape [1 groups OG (* CG KH KW)]))
              (y (matmul (cast Wm i32) (cast P i32))))
          (VIEW y :reshape [N O OH OW]))
        (conv2d xc wc :stride stride :padding padding :dilation dilation :groups groups))))

;;; Weight-only 4-bit matmul, onnxruntime's com.microsoft MatMulNBits. The codes stay packed: one
;;; kernel reads each byte once and multiplies both nibbles by contiguous activations (A split into
;;; its even and odd k, a copy of M*K elements), a block's scale and zero point applied in registers.
;;; The sum keeps 8 lanes of each block apart, [N M 8] (W's rows as the batch axis of a tiled
;;; reduction: the threads share them, a row's 8 partial sums stay in one vector register over its
;;; blocks), then adds the lanes. Summed whole per block, a row paid a horizontal add every 16
;;; bytes (a 768x768 GEMV: 2x slower); with 16 lanes LLVM kept the partials in memory.

(composite nbits-zero-point ((Z{U}[...] N KB) -> (Y{U}[...]))
  "MatMulNBits' 4-bit zero points [N*ceil(KB/2)] u8 (two blocks a byte, the even block in the low nibble) as [N KB]"
  (let ((h (idiv (+ KB 1) 2))
        (ok (assert (same-dim? (count Z) (* N h))
                    "matmul-nbits: packed zero points need N*ceil(blocks/2) =" (* N h) "bytes, got" (count Z)))
        (zb (expand (VIEW Z :reshape [N h 1]) [N h 2]))
        (d (cast (+ 1 (* 15 (INDEX [N h 2] :axis 2 :dtype i32))) (dtype Z))))
    ;; each byte seen twice, divided by 1 then 16: elementwise, so it fuses into its reader
    (VIEW (mod (idiv zb d) 16) :reshape [N (* 2 h)] :shrink [[0 N] [0 KB]])))

(composite nbits-per-step ((P{T}[...]) -> (Y{T}[...]) &key (n 1) (kb 1) (j2 1))
  "a per-block value P [n*kb] as [n 1 kb*j2 1]: each block's entry repeated for its j2 steps"
  (VIEW (expand (VIEW P :reshape [n 1 kb 1 1]) [n 1 kb j2 1]) :reshape [n 1 (* kb j2) 1]))

(composite nbits-codes ((B{u8}[...] Z{C}[...]) -> (Y{C}[...]) &key (zero-point nil) (bits 4))
  "MatMulNBits' codes minus their zero points, B [N KB J] as [N KB BS] in the dtype of Z (a scalar naming it; its value unused): the dequantized weights before the scales (the gradient's)"
  (let ((N (dim B 0)) (KB (dim B 1)) (J (dim B 2))
        (q (if (= bits 4)
               ;; each byte seen twice, divided by 1 then 16: the even k in the low nibble
               (VIEW (mod (idiv (expand (VIEW B :reshape [N KB J 1]) [N KB J 2])
                                (cast (+ 1 (* 15 (INDEX [N KB J 2] :axis 3 :dtype i32))) u8)) 16)
                     :reshape [N KB (* 2 J)])
               B))
        (z (if (nil? zero-point)
               (full [] (if (= bits 4) 8 128) :dtype (dtype Z))
               (VIEW (cast (if (float? zero-point) zero-point
                               (if (= bits 4) (nbits-zero-point (cast zero-point u8) N KB) zero-point))
                           (dtype Z))
                     :reshape [N KB 1]))))
    (- (cast q (dtype Z)) z)))

(composite matmul-nbits ((A{T}[...] B{u8}[...] S{V}[...]) -> (Y{T}[...])
                         &key (zero-point nil) (bias nil) (bits 4))
  "onnxruntime's MatMulNBits: A [..., K] @ W^T (+ :bias [N]), W [N K] in blocks of bs along K, code q of B u8 [N, ceil(K/bs), bs*bits/8] (4 bits: two a byte, the even k in the low nibble) as (q - z) * S, S [N*blocks]; z: :zero-point u8 (4 bits: packed nibbles [N*ceil(blocks/2)]; 8: [N*blocks]), a float [N*blocks], or 8 (128 for 8 bits); summed in f32 (f64 for f64 A)"
  :vjp ((dY)
        ;; W = (q - z) * S per block: dA = dY W, dS = per-block sums of (dYᵀ A) (q - z)
        (let ((C (if (= (bits A) 64) f64 f32))
              (N (dim B 0)) (KB (dim B 1)) (K (dim A -1))
              (c (nbits-codes B (full [] 0 :dtype C) :zero-point zero-point :bits bits))
              (BS (dim c 2))
              (w (VIEW (* c (VIEW (cast S C) :reshape [N KB 1])) :reshape [N (* KB BS)] :shrink [[0 N] [0 K]]))
              (a (cast (VIEW A :reshape [(count A (range 0 (- (rank A) 1))) K]) C))
              (g (cast (VIEW dY :reshape [(dim a 0) N]) C))
              (ga (VIEW (matmul (transpose g) a) :pad [[0 0] [0 (- (* KB BS) K)]] :reshape [N KB BS])))
          (return (cast (VIEW (matmul g w) :reshape (shape A)) (dtype A))
                  nil
                  (cast (VIEW (sum (* ga c) :axis 2) :reshape (shape S)) (dtype S)))))
  (assert (or (= bits 4) (= bits 8)) "matmul-nbits: only 4- and 8-bit codes are supported, got bits" bits)
  (assert (float? A) "matmul-nbits: A must be a float tensor, got" (dtype A))
  (assert (= (rank B) 3) "matmul-nbits: B is [N, blocks, block_size*bits/8], got rank" (rank B))
  (assert (float? S) "matmul-nbits: the scales must be floats, got" (dtype S))
  (setf N (dim B 0))
  (setf KB (dim B 1))
  (setf J (dim B 2))  ; bytes a block
  (setf K (dim A -1))
  (setf per (if (= bits 4) 2 1))  ; codes a byte
  (setf BS (* per J))
  (assert (and (known? J) (known? KB) (known? K)) "matmul-nbits: K and B's block sizes must be static, got" K KB J)
  (assert (and (>= J 8) (= (mod J 8) 0))
          "matmul-nbits: the block size must be a multiple of" (* 8 per) "(B's last dim of 8), got" BS)
  (assert (= KB (idiv (+ K (- BS 1)) BS)) "matmul-nbits: B has" KB "blocks of" BS "codes for K =" K)
  (assert (same-dim? (count S) (* N KB)) "matmul-nbits: N*blocks =" (* N KB) "scales needed, got" (count S))
  (setf C (if (= (bits A) 64) f64 f32))
  (setf L 8)  ; (one AVX2 vector of f32)
  (setf J2 (idiv J L))
  ;; a block's J2 vectors of 8 bytes are one loop with the blocks (KB*J2 steps): its scale and zero
  ;; point are read at step / J2 (a nested loop of J2 = 2 steps cost a quarter of the instructions)
  (setf KJ (* KB J2))
  (setf r (rank A))
  (setf pre [])
  (dotimes (i (- r 1)) (setf pre (append pre [(dim A i)])))
  (setf M (count A (range 0 (- r 1))))
  ;; A as [per M KB J] (4 bits: its even and odd k), zero past K, contiguous: a byte's codes meet
  ;; activations of the same offset
  (setf ad (contiguous (VIEW (cast (VIEW A :reshape [M K]) C) :pad [[0 0] [0 (- (* KB BS) K)]]
                             :reshape [M KB J per] :permute [3 0 1 2])))
  (setf b (VIEW B :reshape [N 1 KJ L]))
  (setf s (nbits-per-step (cast S C) :n N :kb KB :j2 J2))
  (setf Z (if (= bits 4) i8 i16))  ; holds code - zero point
  (setf zf nil)
  (setf zi nil)
  (if (and (not (nil? zero-point)) (float? zero-point))
      (progn
        (assert (same-dim? (count zero-point) (* N KB))
                "matmul-nbits: float zero points need N*blocks =" (* N KB) "entries, got" (count zero-point))
        (setf zf (nbits-per-step (cast zero-point C) :n N :kb KB :j2 J2)))
      (if (nil? zero-point)
          (setf zi (full [] (if (= bits 4) 8 128) :dtype Z))
          (progn
            (assert (and (int? zero-point) (= (bits zero-point) 8))
                    "matmul-nbits: zero points are bytes or floats, got" (dtype zero-point))
            (setf zu (cast zero-point u8))
            (setf zi (nbits-per-step (cast (if (= bits 4) (nbits-zero-point zu N KB) zu) Z) :n N :kb KB :j2 J2)))))
  ;; (code - z): integer zero points are subtracted in 8 bits (4-bit codes) or 16, before widening
  (setf y nil)
  (if (= bits 4)
      (let ((ae (VIEW ad :shrink [[0 1] [0 M] [0 KB] [0 J]] :reshape [1 M KJ L]))
            (ao (VIEW ad :shrink [[1 2] [0 M] [0 KB] [0 J]] :reshape [1 M KJ L]))
            (lo (if (nil? zf) (cast (- (cast (mod b 16) Z) zi) C) (- (cast (mod b 16) C) zf)))
            (hi (if (nil? zf) (cast (- (cast (idiv b 16) Z) zi) C) (- (cast (idiv b 16) C) zf))))
        (setf y (sum (sum (* (+ (* ae lo) (* ao hi)) s) :axis 2) :axis 2)))
      (let ((a (VIEW ad :reshape [1 M KJ L]))
            (q (if (nil? zf) (cast (- (cast b Z) zi) C) (- (cast b C) zf))))
        (setf y (sum (sum (* (* a q) s) :axis 2) :axis 2))))
  (if (not (nil? bias))
      (progn
        (assert (same-dim? (count bias) N) "matmul-nbits: the bias needs N =" N "entries, got" (count bias))
        (setf y (+ y (VIEW (cast bias C) :reshape [N 1])))))
  (VIEW (cast y (dtype A)) :permute [1 0] :reshape (append pre [N])))
