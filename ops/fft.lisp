;;; Discrete Fourier transforms over planar complex pairs (re, im) of real tensors (f32 or f64):
;;; a mixed-radix Cooley-Tukey FFT unrolled at elaboration time over the static length of the
;;; transformed axis, each stage a small DFT matmul, a twiddle product and views. Angles are exact:
;;; the exponent (j k) mod n is an integer, reduced to [-pi/2, pi/2] in integers, and its sine is
;;; taken in f64, then rounded once to the data's dtype.

(composite fft-sinpi ((A{U}[...] b) -> (S{f64}[...]))
  "sin(pi a / b) in f64 for integer tensors a and a positive integer b, the reduction done in integers (sin(k pi) is exactly 0)"
  (setf r (mod (cast A i64) (* 2 b)))
  (setf r (WHERE (> r b) (- r (* 2 b)) r))
  (setf r (WHERE (> (* 2 r) b) (- b r) r))
  (setf r (WHERE (< (* 2 r) (- 0 b)) (- (- 0 b) r) r))
  (SIN (* (cast r f64) (/ 3.141592653589793 b))))

(composite fft-twiddle ((E{U}[...]) -> (C{T}[...] S{T}[...]) &key (n 8) (dtype nil) (sign -1))
  "exp(sign 2 pi i e / n) for an integer exponent tensor e: its (cos, sin) pair in :dtype (default f64)"
  (setf dt (if (nil? dtype) f64 dtype))
  (return (cast (fft-sinpi (+ (* 4 (cast E i64)) n) (* 2 n)) dt)
          (cast (* sign (fft-sinpi (* 2 (cast E i64)) n)) dt)))

(composite fft-twiddles ((X{T}[...] f m n sign) -> (C{T}[...] S{T}[...]))
  "the [f, m] twiddles w_n^(k j) (w = exp(sign 2 pi i / n)) in X's dtype; for a long m, j = q B + r and w^(k q B) w^(k r) from two small exact tables, multiplied in f64 (about 1 ulp more, for a sine per B elements rather than per element)"
  (setf dt (dtype X))
  (setf B (cond ((< m 4096) 1) ((= (mod m 256) 0) 256) ((= (mod m 64) 0) 64) ((= (mod m 16) 0) 16) (true 1)))
  (setf Q (idiv m B))
  (setf w (if (= B 1)
              (fft-twiddle (* (INDEX [f m] :axis 0) (INDEX [f m] :axis 1)) :n n :dtype dt :sign sign)
              (fft-twiddle (* (INDEX [f Q 1] :axis 0) (* B (INDEX [f Q 1] :axis 1))) :n n :sign sign)))
  (setf v (fft-twiddle (* (INDEX [f 1 B] :axis 0) (INDEX [f 1 B] :axis 2)) :n n :sign sign))
  (setf ar (nth w 0))
  (setf ai (nth w 1))
  (setf br (nth v 0))
  (setf bi (nth v 1))
  (return (if (= B 1) ar (cast (reshape (- (* ar br) (* ai bi)) [f m]) dt))
          (if (= B 1) ai (cast (reshape (+ (* ar bi) (* ai br)) [f m]) dt))))

;;; One level: n = f * m, input index j = m j1 + j2, output index k = k1 + f k2. The DFT of size f
;;; over j1 is a matmul with the f x f matrix, then the twiddles w_n^(k1 j2), then the DFT of size m
;;; over j2 (the recursion), and [k1, k2] read as [k2, k1].

(composite fft-last ((Xr{T}[...] Xi{T}[...]) -> (Yr{T}[...] Yi{T}[...]) &key (sign -1))
  "the unnormalized DFT (sign -1) or its inverse without 1/n (sign 1) along the last axis of a pair of rank >= 2; the length must be known"
  (setf L (dim Xr -1))
  (assert (known? L) "fft: the transformed length must be known at compile time")
  (setf f (cond ((<= L 16) L) ((= (mod L 16) 0) 16) ((= (mod L 8) 0) 8) ((= (mod L 4) 0) 4)
                ((= (mod L 2) 0) 2) ((= (mod L 3) 0) 3) ((= (mod L 5) 0) 5) ((= (mod L 7) 0) 7)
                ((= (mod L 11) 0) 11) ((= (mod L 13) 0) 13) (true L)))
  (setf dt (dtype Xr))
  (setf jk (* (INDEX [f f] :axis 0) (INDEX [f f] :axis 1)))
  (setf F (fft-twiddle jk :n f :dtype dt :sign sign))
  (setf Fr (nth F 0))
  (setf Fi (nth F 1))
  (if (= f L)
      (return (- (matmul Xr Fr) (matmul Xi Fi)) (+ (matmul Xi Fr) (matmul Xr Fi)))
      (progn
        (setf m (idiv L f))
        (setf pre [])
        (dotimes (i (- (rank Xr) 1)) (setf pre (append pre [(dim Xr i)])))
        (setf ar (reshape Xr (append pre [f m])))
        (setf ai (reshape Xi (append pre [f m])))
        (setf br (- (matmul Fr ar) (matmul Fi ai)))
        (setf bi (+ (matmul Fr ai) (matmul Fi ar)))
        (setf W (fft-twiddles Xr f m L sign))
        (setf Wr (COPY (nth W 0)))
        (setf Wi (COPY (nth W 1)))
        (setf c (fft-last (- (* br Wr) (* bi Wi)) (+ (* br Wi) (* bi Wr)) :sign sign))
        (return (reshape (transpose (nth c 0)) (append pre [L]))
                (reshape (transpose (nth c 1)) (append pre [L]))))))

(composite fft-to-last ((X{T}[...]) -> (Y{T}[...]) &key (axis -1) (n nil))
  "axis :axis moved last, cut or zero-padded to length :n there (default: kept), behind a leading axis of 1 (so the rank is at least 2)"
  (setf r (rank X))
  (setf ax (axis X axis))
  (setf n (if (nil? n) (dim X ax) n))
  (setf perm [])
  (setf cut [])
  (setf widths [])
  (dotimes (i r)
    (if (= i ax) nil
        (progn (setf perm (append perm [i]))
               (setf cut (append cut [[0 (dim X i) 1]]))
               (setf widths (append widths [[0 0]])))))
  (setf y (permute X (append perm [ax])))
  (setf d (dim X ax))
  (setf y (cond ((< n d) (VIEW y :slice (append cut [[0 n 1]])))
                ((> n d) (pad y (append widths [[0 (- n d)]])))
                (true y)))
  (VIEW y :unsqueeze 0))

(composite fft-from-last ((X{T}[...]) -> (Y{T}[...]) &key (axis -1))
  "fft-to-last's layout undone: the leading axis of 1 dropped, the last axis moved back to :axis"
  (setf r (- (rank X) 1))
  (setf ax (axis (VIEW X :squeeze 0) axis))
  (setf inv [])
  (dotimes (i r) (setf inv (append inv [(cond ((< i ax) i) ((= i ax) (- r 1)) (true (- i 1)))])))
  (permute (VIEW X :squeeze 0) inv))

(composite fft-normed ((Xr{T}[...] Xi{T}[...]) -> (Yr{T}[...] Yi{T}[...]) &key (axis -1) (norm-exp 0) (inverse false))
  "fft-last on a pair laid out by fft-to-last, scaled by n**-p (forward) or n**-(1 - p) (inverse), p = :norm-exp, and moved back to :axis"
  (setf p norm-exp)
  (setf n (dim Xr -1))
  (assert (or (= p 0) (= p 0.5) (= p 1))
          "fft: :norm-exp must be 0 (torch's norm=\"backward\"), 0.5 (\"ortho\") or 1 (\"forward\"), got" p)
  (setf y (fft-last Xr Xi :sign (if inverse 1 -1)))
  (setf e (if inverse (- 1 p) p))
  (setf s (cond ((= e 0.5) (/ 1.0 (sqrt (* 1.0 n)))) ((= e 1) (/ 1.0 n)) (true 1)))
  (setf yr (nth y 0))
  (setf yi (nth y 1))
  (return (fft-from-last (if (= e 0) yr (* yr s)) :axis axis) (fft-from-last (if (= e 0) yi (* yi s)) :axis axis)))

(composite fft ((Re{T}[...] Im{T}[...]) -> (YRe{T}[...] YIm{T}[...]) &key (axis -1) (n nil) (norm-exp 0) (inverse false))
  "torch.fft.fft (torch.fft.ifft with :inverse true) of the complex pair (re, im) along :axis, cut or zero-padded to :n first; :norm-exp p scales the forward transform by n**-p and the inverse by n**-(1 - p): torch's norm \"backward\" is 0, \"ortho\" 0.5, \"forward\" 1"
  (assert (float? Re) "fft needs float tensors (f32 or f64), got" (dtype Re))
  (assert (> (rank Re) 0) "fft needs a tensor of rank >= 1")
  (setf ax (axis Re axis))
  (setf nn (if (nil? n) (dim Re ax) n))
  (assert (known? nn) "fft: the transformed length must be known at compile time")
  (assert (>= nn 1) "fft: invalid number of data points" nn)
  (setf y (fft-normed (fft-to-last Re :axis ax :n nn) (fft-to-last Im :axis ax :n nn) :axis ax :norm-exp norm-exp :inverse inverse))
  (return (nth y 0) (nth y 1)))

(composite rfft ((X{T}[...]) -> (YRe{T}[...] YIm{T}[...]) &key (axis -1) (n nil) (norm-exp 0))
  "torch.fft.rfft: the n // 2 + 1 non-negative frequencies of the DFT of real X along :axis (cut or zero-padded to :n first)"
  (assert (float? X) "rfft needs a float tensor (f32 or f64), got" (dtype X))
  (assert (> (rank X) 0) "rfft needs a tensor of rank >= 1")
  (setf ax (axis X axis))
  (setf nn (if (nil? n) (dim X ax) n))
  (assert (known? nn) "rfft: the transformed length must be known at compile time")
  (assert (>= nn 1) "rfft: invalid number of data points" nn)
  (setf xr (fft-to-last X :axis ax :n nn))
  (setf y (fft-normed xr (CONST 0 :dtype (dtype X) :shape (shape xr)) :axis ax :norm-exp norm-exp))
  (setf keep [])
  (dotimes (i (rank X)) (setf keep (append keep [(if (= i ax) [0 (+ (idiv nn 2) 1) 1] [0 (dim X i) 1])])))
  (return (VIEW (nth y 0) :slice keep) (VIEW (nth y 1) :slice keep)))

(composite irfft ((Re{T}[...] Im{T}[...]) -> (Y{T}[...]) &key (axis -1) (n nil) (norm-exp 0))
  "torch.fft.irfft: the real signal of length :n (default 2 (m - 1)) whose onesided spectrum is (re, im) along :axis; the spectrum is cut or zero-padded to n // 2 + 1 bins and mirrored (the imaginary parts of the DC and Nyquist bins are ignored, as pocketfft's)"
  (assert (float? Re) "irfft needs float tensors (f32 or f64), got" (dtype Re))
  (assert (> (rank Re) 0) "irfft needs a tensor of rank >= 1")
  (setf ax (axis Re axis))
  (setf nn (if (nil? n) (* 2 (- (dim Re ax) 1)) n))
  (assert (known? nn) "irfft: the output length must be known at compile time")
  (assert (>= nn 1) "irfft: invalid number of data points" nn "(an input of one bin needs :n)")
  (setf h (+ (idiv nn 2) 1))
  (setf hr (fft-to-last Re :axis ax :n h))
  (setf hi (fft-to-last Im :axis ax :n h))
  (setf cut [])
  (dotimes (i (- (rank hr) 1)) (setf cut (append cut [[0 (dim hr i) 1]])))
  (setf spec (append cut [[1 (- nn (idiv nn 2)) 1]]))
  (setf fr (concat hr (VIEW (VIEW hr :slice spec) :flip [-1]) :axis -1))
  (setf fi (concat hi (NEG (VIEW (VIEW hi :slice spec) :flip [-1])) :axis -1))
  (nth (fft-normed fr fi :axis ax :norm-exp norm-exp :inverse true) 0))
