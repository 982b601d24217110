//! The normal and Student-t distributions the sequential final answer needs: the normal
//! CDF, its inverse, and Student-t quantiles (no statistics crate in the workspace; these
//! are the standard closed-form approximations, accurate to ~1e-7).

/// Standard normal CDF Φ(x) (Numerical Recipes' erfc, |error| < 1.2e-7).
pub fn cdf(x: f64) -> f64 {
    let z = x.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let erfc = t * poly.exp();
    if x >= 0.0 {
        1.0 - 0.5 * erfc
    } else {
        0.5 * erfc
    }
}

/// Standard normal quantile Φ⁻¹(p) for 0 < p < 1 (Acklam's rational approximation,
/// relative error < 1.2e-9); ±∞ at 0 and 1.
pub fn quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    let low = 0.024_25;
    if p < low {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - low {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Student-t quantile with `df` degrees of freedom (the Cornish-Fisher expansion around
/// the normal quantile, to the ν⁻³ term: within 0.5% for df ≥ 3; the normal for df = ∞).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    let z = quantile(p);
    if !df.is_finite() {
        return z;
    }
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * df)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df * df)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * df.powi(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbook_values() {
        assert!((cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((cdf(1.959_964) - 0.975).abs() < 1e-6);
        assert!((cdf(-2.575_829) - 0.005).abs() < 1e-6);
        assert!((quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((quantile(0.001) + 3.090_232).abs() < 1e-5);
        assert!((quantile(0.5)).abs() < 1e-12);
        assert_eq!(quantile(0.0), f64::NEG_INFINITY);
        // t tables: t(0.975; 7) = 2.3646, t(0.975; 30) = 2.0423, t(0.99375; 88) = 2.5501.
        assert!((t_quantile(0.975, 7.0) - 2.3646).abs() < 0.01);
        assert!((t_quantile(0.975, 30.0) - 2.0423).abs() < 0.002);
        assert!((t_quantile(0.993_75, 88.0) - 2.5501).abs() < 0.002);
        for p in [0.01, 0.2, 0.7, 0.995] {
            assert!((cdf(quantile(p)) - p).abs() < 1e-6, "{p}");
        }
    }
}
