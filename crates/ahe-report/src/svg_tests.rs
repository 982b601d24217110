use super::*;

#[test]
fn escapes_and_scales() {
    assert_eq!(
        esc(r#"<a href="x">&'"#),
        "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
    );
    assert_eq!(nice_ceiling(0.0), 1.0);
    assert_eq!(nice_ceiling(3.0), 5.0);
    assert_eq!(nice_ceiling(0.012), 0.02);
    assert_eq!(nice_ceiling(100.0), 100.0);
}

#[test]
fn pass_chart_has_points_bars_and_best() {
    let pts = vec![
        PassPoint {
            iteration: 1,
            label: "1".into(),
            visible: Some((0.25, [0.0, 0.5])),
            holdout: Some((0.5, [0.5, 0.5])),
            best: false,
        },
        PassPoint {
            iteration: 2,
            label: "2 <final>".into(),
            visible: Some((0.75, [0.5, 1.0])),
            holdout: None,
            best: true,
        },
    ];
    let s = pass_chart(&pts);
    assert_eq!(
        s.matches(r#"<g class="point visible" data-iteration"#)
            .count(),
        2
    );
    assert_eq!(
        s.matches(r#"<g class="point holdout" data-iteration"#)
            .count(),
        1
    );
    assert!(s.contains(r#"data-value="0.7500""#));
    assert!(s.contains(r#"<g class="best-mark" data-iteration="2">"#));
    assert!(s.contains("2 &lt;final&gt;") && !s.contains("<final>"));
}

#[test]
fn heatmap_cells_and_links() {
    let rows = vec![("a<b".to_string(), false), ("h".to_string(), true)];
    let cols = vec![(1, "1".to_string()), (2, "2".to_string())];
    let cell = |c: &'static str| {
        Some(HeatCell {
            text: "1/2".into(),
            class: c,
            title: "t".into(),
            href: Some("report/trials/001/a%3Cb/1.html".into()),
        })
    };
    let s = heatmap(
        &rows,
        &cols,
        &[
            vec![cell("c-partial"), None],
            vec![cell("c-pass"), cell("c-infra")],
        ],
    );
    assert_eq!(s.matches(r#"<rect class="cell c-"#).count(), 4);
    assert_eq!(s.matches("data-task=").count(), 3);
    assert!(s.contains("a&lt;b") && s.contains("row-label holdout"));
    assert!(s.contains("c-none"));
}

#[test]
fn stacked_bars_skip_zero_segments() {
    let s = stacked_bars(
        "x",
        &["1".into(), "2".into()],
        &[
            Series {
                label: "a".into(),
                values: vec![1.0, 0.0],
            },
            Series {
                label: "b".into(),
                values: vec![2.0, 3.0],
            },
        ],
        &|v| format!("{v:.0}"),
    );
    assert_eq!(s.matches("data-series=").count(), 3);
    assert!(s.contains(r#"data-value="3""#));
}
