/*
 * The bundle's one export, which Airflow's UI renders (react_apps, Airflow 3.1+): the
 * page in the navigation, or a task instance's "Atomic Store" tab when the UI hands it
 * one (`dagId`, `runId`, `taskId`; `mapIndex` for a mapped one). One component for both
 * apps: the UI keeps a loaded app under its name, and both are named "Atomic Store".
 */
import { StorePage } from "./StorePage";
import { TaskInstanceTab, type TaskInstanceProps } from "./TaskInstanceTab";

export default function AtomicStore(props: TaskInstanceProps) {
  if (props.dagId && props.runId && props.taskId) return <TaskInstanceTab {...props} />;
  return <StorePage />;
}
