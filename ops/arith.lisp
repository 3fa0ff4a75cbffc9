;;; Arithmetic, comparison, logic and selection, each a few principal ops.
;;; [...] in a signature accepts any shape; &fold lets (+ a b c) mean (+ (+ a b) c).

(composite + ((A{T}[...] B{T}[...] &fold) -> (C{T}[...])) "a + b (numpy broadcasting)" (ADD A B))
(composite * ((A{T}[...] B{T}[...] &fold) -> (C{T}[...])) "a * b" (MUL A B))
(composite - ((A{T}[...]) -> (C{T}[...])) "negation" (NEG A))
(composite - ((A{T}[...] B{T}[...] &fold) -> (C{T}[...])) "a - b" (ADD A (NEG B)))
(composite / ((A{T}[...] B{T}[...]) -> (C{T}[...])) "true division, correctly rounded (float operands)" (FDIV A B))
(composite neg ((A{T}[...]) -> (C{T}[...])) "-a" (NEG A))
(composite recip ((A{T}[...]) -> (C{T}[...])) "1/a (float)" (RECIP A))
(composite mod ((A{T}[...] B{T}[...]) -> (C{T}[...])) "remainder with the divisor's sign, as numpy's %" (MOD A B))
(composite idiv ((A{T}[...] B{T}[...]) -> (C{T}[...])) "floor division, as numpy's //" (IDIV A B))

(composite max ((A{T}[...] B{T}[...]) -> (C{T}[...])) "elementwise maximum (nan propagates)" (MAX A B))
(composite min ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "elementwise minimum (nan propagates)"
  ;; floats: negation reverses order exactly; integers and bool: bitwise not does, without overflow
  (if (float? A) (NEG (MAX (NEG A) (NEG B))) (NOT (MAX (NOT A) (NOT B)))))

(composite abs ((A{T}[...]) -> (C{T}[...]))
  "absolute value (the sign bit cleared: abs of -0.0 is +0.0)"
  ;; floats: a zero (either sign) becomes the constant +0, a nan (either sign) the constant +nan,
  ;; so the sign bit is always clear, as IEEE's abs and numpy's
  (if (float? A)
      (WHERE (CMPLT 0 A) A (WHERE (CMPLT A 0) (NEG A) (WHERE (CMPNE A A) (CONST nan :dtype (dtype A)) 0)))
      (WHERE (CMPLT A 0) (NEG A) A)))
(composite sign ((A{T}[...]) -> (C{T}[...]))
  "-1, 0 or 1 (0 for nan and -0.0, as torch's sign; a bool is its own sign)"
  :vjp ((dC) nil)
  (if (bool? A) A (ADD (CAST (CMPLT 0 A) (dtype A)) (NEG (CAST (CMPLT A 0) (dtype A))))))

(composite pow ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "a ** b: floats as 2**(b log2 |a|) with C99 Annex F's special cases; integers by repeated squaring"
  ;; torch's pow_backward_self / _exponent: b a**(b-1) (0 where b = 0), and a**b log a (0 where
  ;; a = +-0 and b >= 0; so nan for a < 0 and -inf for a = 0, b < 0, as torch gives)
  :vjp ((dC)
        (return (WHERE (= B 0) 0 (* dC (* B (pow A (- B 1)))))
                (* dC (WHERE (AND (= A 0) (<= 0 B)) 0 (* C (log A))))))
  (if (float? A)
      (let ((wide (= (bits A) 64))
            (a (if wide A (CAST A f64)))
            (b (if wide B (CAST B f64)))
            (x (abs a))
            (plain (EXP2 (MUL b (LOG2 x))))
            ;; below f64, plain is computed in f64 and within an ulp; f64 needs log2 in double-double
            (mag (if wide (pow-f64-magnitude x b plain) plain))
            ;; b is an odd integer (every float beyond 2**53 is even); MOD of +-inf or nan is nan
            (odd-b (= (MOD b 2) 1))
            ;; the sign bit of a: a < 0, or a = -0.0 (whose reciprocal is -inf)
            (neg-a (OR (CMPLT a 0) (CMPLT (RECIP a) 0)))
            (signed (WHERE (AND neg-a odd-b) (NEG mag) mag))
            ;; finite a < 0 with finite non-integral b; -inf and b = +-inf keep their magnitude
            (bad (AND (AND (CMPLT a 0) (CMPLT -inf a)) (CMPLT 0 (MOD b 1))))
            ;; pow(x, +-0) = 1 and pow(1, y) = 1 even for nan; pow(-1, +-inf) = 1
            (one (OR (OR (= b 0) (= a 1)) (AND (= a -1) (= (abs b) inf))))
            (r (WHERE one 1 (WHERE bad nan signed))))
        (if wide r (CAST r (dtype A))))
      (progn
        (setf acc (CONST 1 :dtype (dtype A) :shape (shape (ADD A B))))
        (setf base A)
        (setf e B)
        (dotimes (i (- (bits A) 1))
          (setf acc (WHERE (= (MOD e 2) 1) (MUL acc base) acc))
          (setf base (MUL base base))
          (setf e (IDIV e 2)))
        acc)))

;;; comparisons give bool; written so that nan compares false
(composite < ((A{T}[...] B{T}[...]) -> (C{bool}[...])) "a < b" (CMPLT A B))
(composite > ((A{T}[...] B{T}[...]) -> (C{bool}[...])) "a > b" (CMPLT B A))
(composite <= ((A{T}[...] B{T}[...]) -> (C{bool}[...])) "a <= b" (OR (CMPLT A B) (NOT (CMPNE A B))))
(composite >= ((A{T}[...] B{T}[...]) -> (C{bool}[...])) "a >= b" (OR (CMPLT B A) (NOT (CMPNE A B))))
(composite = ((A{T}[...] B{T}[...]) -> (C{bool}[...])) "a == b" (NOT (CMPNE A B)))
(composite != ((A{T}[...] B{T}[...]) -> (C{bool}[...])) "a != b" (CMPNE A B))

;;; logic: logical on bool, bitwise on integers
(composite and ((A{T}[...] B{T}[...] &fold) -> (C{T}[...])) "logical/bitwise and" (AND A B))
(composite or ((A{T}[...] B{T}[...] &fold) -> (C{T}[...])) "logical/bitwise or" (OR A B))
(composite xor ((A{T}[...] B{T}[...]) -> (C{T}[...])) "logical/bitwise xor" (XOR A B))
(composite not ((A{T}[...]) -> (C{T}[...])) "logical/bitwise not" (NOT A))

(composite where ((C{bool}[...] A{T}[...] B{T}[...]) -> (Y{T}[...])) "c ? a : b elementwise" (WHERE C A B))
(composite cast ((X{T}[...] dtype) -> (Y{U}[...])) "convert to DTYPE (float->int truncates)" (CAST X dtype))
(composite bitcast ((X{T}[...] dtype) -> (Y{U}[...])) "reinterpret the bits as DTYPE of the same width (numpy view, torch view(dtype))" (BITCAST X dtype))

;;; shifts on integers, as torch's CPU kernels: a shift count outside [0, bits) gives 0 for <<, the
;;; sign fill for a signed >> (0 unsigned); in range, a << n = a * 2**n (wrapping) and a >> n =
;;; floor(a / 2**n), the arithmetic shift
(composite pow2 ((N{T}[...]) -> (P{T}[...]))
  "2**n for integers 0 <= n < bits, by the binary digits of n (the helper of the shifts)"
  (setf acc (+ (* N 0) 1))
  (dotimes (i (if (= (bits N) 8) 3 (if (= (bits N) 16) 4 (if (= (bits N) 32) 5 6))))
    (setf acc (where (= (mod (idiv N (nth [1 2 4 8 16 32] i)) 2) 1)
                     (* acc (nth [2 4 16 256 65536 4294967296] i)) acc)))
  acc)
(composite shl ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "a << b (integers; 0 where b < 0 or b >= the bit width, as torch)"
  :vjp ((dC) (return nil nil))
  (assert (not (float? A)) "shl takes integer tensors (as torch)")
  (let ((out (or (< B 0) (>= B (bits A)))))
    (where out (* A 0) (* A (pow2 (where out (* B 0) B))))))
(composite shr ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "a >> b, arithmetic (integers; a >> (bits - 1) where b < 0 or b >= bits - 1 for signed, 0 past bits - 1 unsigned, as torch)"
  :vjp ((dC) (return nil nil))
  (assert (not (float? A)) "shr takes integer tensors (as torch)")
  ;; signedness from the data type, as a (constant) value: 0 - 1 wraps to the maximum when unsigned
  (let ((signed (< (- (* A 0) 1) 0))
        (top (- (+ (* B 0) (bits A)) (cast signed (dtype B))))
        (out (or (< B 0) (>= B top)))
        (fill (where signed (- 0 (cast (< A 0) (dtype A))) (* A 0))))
    (where out fill (idiv A (pow2 (where out (* B 0) B))))))

(composite gcd ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "the greatest common divisor of |a| and |b| (0 for two zeros), by Euclid's steps: as many as the dtype's worst case (consecutive Fibonacci numbers) needs"
  :vjp ((dC) (return nil nil))
  (assert (not (float? A)) "gcd takes integer tensors (as torch)")
  (setf a (abs A))
  (setf b (abs B))
  (dotimes (i (if (= (bits A) 8) 12 (if (= (bits A) 16) 24 (if (= (bits A) 32) 47 93))))
    (setf nz (!= a 0))
    (setf c a)
    (setf a (where nz (mod b (where nz a (+ (* a 0) 1))) a))
    (setf b (where nz c b)))
  b)
(composite lcm ((A{T}[...] B{T}[...]) -> (C{T}[...]))
  "the least common multiple |a / gcd(a, b) * b| (0 where gcd is 0), as torch computes it"
  :vjp ((dC) (return nil nil))
  (assert (not (float? A)) "lcm takes integer tensors (as torch)")
  ;; narrower than 32 bits, C computes a / g * b and its abs in int, then wraps once to the dtype
  (if (< (bits A) 32)
      (CAST (lcm (CAST A i32) (CAST B i32)) (dtype A))
      (let ((g (gcd A B))
            (z (= g 0)))
        (where z g (abs (* (idiv A (where z (+ g 1) g)) B))))))
