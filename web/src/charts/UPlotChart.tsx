// The one uPlot wrapper: creates the chart once per options object, feeds new data with
// setData(), follows its container's width with setSize(), and destroys it on unmount.
// Live charts skip the `data` prop and call setData() themselves from their store's
// frame-batched listener (see series.ts).

import { useEffect, useLayoutEffect, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

export interface UPlotChartProps {
  options: Omit<uPlot.Options, "width" | "height">;
  data?: uPlot.AlignedData;
  height: number;
  className?: string;
  /** Called with each chart created (again after an options change) and null when it goes. */
  onChart?: (chart: uPlot | null) => void;
}

const EMPTY: uPlot.AlignedData = [[]];

export function UPlotChart({ options, data, height, className, onChart }: UPlotChartProps) {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);
  const dataRef = useRef(data);
  dataRef.current = data;
  const onChartRef = useRef(onChart);
  onChartRef.current = onChart;

  useLayoutEffect(() => {
    const el = host.current;
    if (!el) return;
    const width = Math.max(el.clientWidth, 50);
    const u = new uPlot({ ...options, width, height } as uPlot.Options, dataRef.current ?? EMPTY, el);
    chart.current = u;
    onChartRef.current?.(u);
    let frame = 0;
    const observer = new ResizeObserver(() => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(() => {
        const w = Math.max(el.clientWidth, 50);
        if (w !== u.width) u.setSize({ width: w, height });
      });
    });
    observer.observe(el);
    return () => {
      cancelAnimationFrame(frame);
      observer.disconnect();
      onChartRef.current?.(null);
      chart.current = null;
      u.destroy();
    };
  }, [options, height]);

  useEffect(() => {
    if (data && chart.current && chart.current.data !== data) chart.current.setData(data);
  }, [data]);

  return <div ref={host} className={className} style={{ minHeight: height }} />;
}
