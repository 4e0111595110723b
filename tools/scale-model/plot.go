package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	stdfont "golang.org/x/image/font"
)

// The plot: four log-log panels of a quantity against the number of
// sidecars, each with the model's curve, the simulation's points and the
// wall the quantity runs into, drawn with gonum.org/v1/plot.

var (
	black       = color.RGBA{20, 20, 20, 255}
	grey        = color.RGBA{90, 90, 90, 255}
	gridGrey    = color.RGBA{225, 225, 225, 255}
	modelBlue   = color.RGBA{31, 100, 200, 255}
	measured    = color.RGBA{230, 110, 0, 255}
	groupsGreen = color.RGBA{20, 150, 70, 255} // the multi-group fleet: its curve and points
	wallRed     = color.RGBA{200, 30, 30, 255}
)

// panel is one quantity: its curve, its points and an optional wall.
type panel struct {
	title     string
	model     []point // the model's curve
	sim       []point // the simulation's measurements
	modelK    []point // the model for K groups (none if not simulated)
	simK      []point // the simulation with K groups
	wall      float64 // 0: none
	wallLabel string
}

type point struct{ x, y float64 }

// figure is the whole image.
type figure struct {
	title      string
	subtitle   []string // sentences; wrapped to the image's width
	groupsK    int      // K of modelK and simK (0: none)
	xLabel     string
	xMin, xMax float64
	panels     []panel
}

const (
	figW, figH = 1500, 1100 // pixels
	dpi        = 100
	margin     = vg.Length(16) // points, around the header and the panels
)

// Text and line styles.
var (
	sans     = font.Font{Typeface: "Liberation", Variant: "Sans"}
	sansBold = font.Font{Typeface: "Liberation", Variant: "Sans", Weight: stdfont.WeightBold}

	titleStyle    = textStyle(sansBold, 20, black)
	subtitleStyle = textStyle(sans, 13, grey)
	legendStyle   = textStyle(sans, 13, black)

	// The K-group curve and points are drawn first and wider, the
	// one-group ones narrower on top, so that where the two agree both
	// still show.
	modelLine  = draw.LineStyle{Color: modelBlue, Width: vg.Points(2)}
	groupsLine = draw.LineStyle{Color: groupsGreen, Width: vg.Points(3.5)}
	wallLine   = draw.LineStyle{Color: wallRed, Width: vg.Points(1.8), Dashes: []vg.Length{vg.Points(6), vg.Points(4)}}
	simGlyph   = draw.GlyphStyle{Color: measured, Radius: vg.Points(4.5), Shape: draw.CircleGlyph{}}
	groupGlyph = draw.GlyphStyle{Color: groupsGreen, Radius: vg.Points(6), Shape: draw.BoxGlyph{}}
)

func textStyle(f font.Font, size vg.Length, c color.Color) text.Style {
	f.Size = size
	return text.Style{Color: c, Font: f, XAlign: draw.XLeft, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
}

// render draws the figure as a PNG.
func (f figure) render(w io.Writer) error {
	img := vgimg.NewWith(vgimg.UseWH(figW*vg.Inch/dpi, figH*vg.Inch/dpi), vgimg.UseDPI(dpi))
	c := draw.New(img)
	below := f.drawHeader(c)
	body := draw.Crop(c, 0, 0, 0, below-c.Max.Y)
	plots := make([][]*plot.Plot, (len(f.panels)+1)/2)
	for i, p := range f.panels {
		pl, err := f.panelPlot(p)
		if err != nil {
			return err
		}
		plots[i/2] = append(plots[i/2], pl)
	}
	if n := len(f.panels); n%2 == 1 {
		plots[n/2] = append(plots[n/2], nil)
	}
	tiles := draw.Tiles{Rows: len(plots), Cols: 2, PadX: 3 * margin, PadY: 2 * margin, PadLeft: margin, PadRight: 2 * margin, PadBottom: margin}
	for j, row := range plot.Align(plots, tiles, body) {
		for i, tc := range row {
			if plots[j][i] != nil {
				plots[j][i].Draw(tc)
			}
		}
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// header is the title, the subtitle wrapped to the width and the legend:
// its lines and the width they may take.
func (f figure) header() (width vg.Length, subtitle []string) {
	width = figW*vg.Inch/dpi - 2*margin
	for _, s := range f.subtitle {
		subtitle = append(subtitle, wrap(s, subtitleStyle, width)...)
	}
	return width, subtitle
}

// drawHeader draws the header from the top of c and returns the height
// under it.
func (f figure) drawHeader(c draw.Canvas) vg.Length {
	x, y := c.Min.X+margin, c.Max.Y-margin
	c.FillText(titleStyle, vg.Point{X: x, Y: y}, f.title)
	y -= titleStyle.Height(f.title) + margin/2
	_, lines := f.header()
	for _, line := range lines {
		c.FillText(subtitleStyle, vg.Point{X: x, Y: y}, line)
		y -= subtitleStyle.Height(line) * 1.15
	}
	y -= margin / 2
	return f.drawLegend(c, x, y)
}

// legendEntries are the legend's labels and what each shows.
func (f figure) legendEntries() (labels []string, thumbs [][]plot.Thumbnailer) {
	model := &plotter.Line{LineStyle: modelLine}
	sim := &plotter.Scatter{GlyphStyle: simGlyph}
	labels = []string{"model (one group)", "measured in the simulation"}
	thumbs = [][]plot.Thumbnailer{{model}, {sim}}
	if f.groupsK > 1 {
		labels = append(labels, fmt.Sprintf("%d groups: model, measured", f.groupsK))
		thumbs = append(thumbs, []plot.Thumbnailer{&plotter.Line{LineStyle: groupsLine}, &plotter.Scatter{GlyphStyle: groupGlyph}})
	}
	labels = append(labels, "wall")
	thumbs = append(thumbs, []plot.Thumbnailer{&plotter.Line{LineStyle: wallLine}})
	return labels, thumbs
}

// drawLegend draws the legend on one line from (x, top) and returns the
// height under it.
func (f figure) drawLegend(c draw.Canvas, x, top vg.Length) vg.Length {
	labels, thumbs := f.legendEntries()
	h := legendStyle.Height("M")
	thumbW := vg.Points(34)
	for i, label := range labels {
		tc := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: x, Y: top - h}, Max: vg.Point{X: x + thumbW, Y: top},
		}}
		for _, t := range thumbs[i] {
			t.Thumbnail(&tc)
		}
		c.FillText(legendStyle, vg.Point{X: x + thumbW + vg.Points(6), Y: top}, label)
		x += thumbW + vg.Points(6) + legendStyle.Width(label) + vg.Points(28)
	}
	return top - h - margin
}

// wrap breaks s into lines no wider than width.
func wrap(s string, sty text.Style, width vg.Length) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(s) {
		next := word
		if line != "" {
			next = line + " " + word
		}
		if line != "" && sty.Width(next) > width {
			lines = append(lines, line)
			next = word
		}
		line = next
	}
	return append(lines, line)
}

// panelPlot is one panel: log-log, whole decades on both axes.
func (f figure) panelPlot(p panel) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = p.title
	pl.Title.TextStyle.Font = font.From(sansBold, 14)
	pl.Title.Padding = vg.Points(8)
	pl.X.Label.Text = f.xLabel
	pl.X.Label.TextStyle.Font = font.From(sans, 13)
	pl.X.Label.TextStyle.Color = grey
	for _, ax := range []*plot.Axis{&pl.X, &pl.Y} {
		ax.Scale = plot.LogScale{}
		ax.Tick.Marker = decadeTicks{}
		ax.Tick.Label.Font = font.From(sans, 12)
	}
	grid := plotter.NewGrid()
	grid.Vertical.Color, grid.Horizontal.Color = gridGrey, gridGrey
	pl.Add(grid)
	if p.wall > 0 {
		wall, err := plotter.NewLine(plotter.XYs{{X: f.xMin, Y: p.wall}, {X: f.xMax, Y: p.wall}})
		if err != nil {
			return nil, err
		}
		wall.LineStyle = wallLine
		label, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: f.xMin, Y: p.wall}}, Labels: []string{p.wallLabel}})
		if err != nil {
			return nil, err
		}
		// At the left end, where the curves (rising to the right) are
		// furthest below a wall.
		label.TextStyle[0] = textStyle(sans, 12, wallRed)
		label.TextStyle[0].YAlign = draw.YBottom
		label.Offset = vg.Point{X: vg.Points(6), Y: vg.Points(3)}
		pl.Add(wall, label)
	}
	for _, s := range []struct {
		pts   []point
		line  *draw.LineStyle
		glyph *draw.GlyphStyle
	}{{p.modelK, &groupsLine, nil}, {p.model, &modelLine, nil}, {p.simK, nil, &groupGlyph}, {p.sim, nil, &simGlyph}} {
		if len(s.pts) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.pts))
		for i, pt := range s.pts {
			xys[i] = plotter.XY{X: pt.x, Y: pt.y}
		}
		if s.line != nil {
			l, err := plotter.NewLine(xys)
			if err != nil {
				return nil, err
			}
			l.LineStyle = *s.line
			pl.Add(l)
		} else {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, err
			}
			sc.GlyphStyle = *s.glyph
			pl.Add(sc)
		}
	}
	lo, hi := decadeRange(p)
	pl.X.Min, pl.X.Max = f.xMin, f.xMax
	pl.Y.Min, pl.Y.Max = math.Pow(10, lo), math.Pow(10, hi)
	return pl, nil
}

// decadeRange is the whole decades that hold every value of the panel.
func decadeRange(p panel) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, pts := range [][]point{p.model, p.sim, p.modelK, p.simK} {
		for _, pt := range pts {
			if pt.y > 0 {
				lo, hi = math.Min(lo, pt.y), math.Max(hi, pt.y)
			}
		}
	}
	if p.wall > 0 {
		lo, hi = math.Min(lo, p.wall), math.Max(hi, p.wall)
	}
	lo, hi = math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi)*1.0001)
	if hi-lo < 2 {
		hi = lo + 2
	}
	return lo, hi
}

// decadeTicks labels each power of ten briefly and marks 2–9 between.
type decadeTicks struct{}

func (decadeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for d := math.Floor(math.Log10(lo) + 1e-9); d <= math.Ceil(math.Log10(hi)-1e-9); d++ {
		v := math.Pow(10, d)
		ticks = append(ticks, plot.Tick{Value: v, Label: compact(v)})
		for m := 2.0; m < 10 && d < math.Ceil(math.Log10(hi)-1e-9); m++ {
			ticks = append(ticks, plot.Tick{Value: m * v})
		}
	}
	return ticks
}

// compact writes a power of ten briefly: 0.01, 1, 100, 10K, 1M.
func compact(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gK", v/1e3)
	default:
		return fmt.Sprintf("%g", v)
	}
}
